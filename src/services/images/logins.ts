/**
 * `forkd login`: registry credentials the daemon keeps in `FORKD_HOME/auth.json` (mode
 * 0600, Docker's `auths` shape), checked against the registry before they are saved.
 * They are read before Docker's `~/.docker/config.json`, and never returned by the API.
 */
import { randomBytes } from 'node:crypto';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import {
  RegistryClient,
  type CredentialSource,
  type Credentials,
} from '../../drivers/registry/index.js';
import { ForkdError } from '../../errors.js';

type AuthFile = { auths: Record<string, { auth: string }> };

const REGISTRY_RULE = /^[a-zA-Z0-9.-]+(:\d{1,5})?$|^\[[0-9a-fA-F:]+\](:\d{1,5})?$/;

function authFile(p: Paths): string {
  return join(p.home, 'auth.json');
}

async function readAuth(p: Paths): Promise<AuthFile> {
  try {
    const f = JSON.parse(await readFile(authFile(p), 'utf8')) as AuthFile;
    return { auths: f.auths ?? {} };
  } catch {
    return { auths: {} };
  }
}

export function validateRegistry(registry: string): void {
  if (REGISTRY_RULE.test(registry)) return;
  throw new ForkdError('bad_request', `${JSON.stringify(registry)} is not a registry host[:port]`, {
    registry,
  });
}

/** Credentials saved by `forkd login`. */
export function forkdCredentials(p: Paths): CredentialSource {
  return async (registry) => {
    const entry = (await readAuth(p)).auths[registry];
    if (!entry) return undefined;
    const text = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = text.indexOf(':');
    return { username: text.slice(0, colon), password: text.slice(colon + 1) };
  };
}

/** Check the credentials against the registry, then save them (replacing older ones). */
export async function login(
  p: Paths,
  registry: string,
  creds: Credentials,
  signal?: AbortSignal,
): Promise<void> {
  validateRegistry(registry);
  await new RegistryClient(registry, { credentials: async () => creds, signal }).ping();
  await saveAuth(
    p,
    registry,
    Buffer.from(`${creds.username}:${creds.password}`).toString('base64'),
  );
}

/** Forget a registry's saved credentials; false when there were none. */
export async function logout(p: Paths, registry: string): Promise<boolean> {
  validateRegistry(registry);
  return saveAuth(p, registry, undefined);
}

async function saveAuth(p: Paths, registry: string, auth: string | undefined): Promise<boolean> {
  const file = await readAuth(p);
  const had = registry in file.auths;
  if (auth) file.auths[registry] = { auth };
  else delete file.auths[registry];
  const tmp = `${authFile(p)}.${randomBytes(4).toString('hex')}`;
  await writeFile(tmp, JSON.stringify(file, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
  await rename(tmp, authFile(p));
  return had;
}
