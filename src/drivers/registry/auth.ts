/**
 * Registry authentication: credentials (forkd's own login file, then Docker's
 * `config.json`), and the distribution spec's challenge flow: a 401 names the scheme in
 * `WWW-Authenticate`; `Basic` is answered with the credentials, `Bearer` by fetching a
 * token from the named realm for the scope asked (with the credentials when there are any).
 */
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ForkdError } from '../../errors.js';

/** A username and password (or token) for one registry. */
export interface Credentials {
  username: string;
  password: string;
}

/** Where credentials come from, by registry host. */
export type CredentialSource = (registry: string) => Promise<Credentials | undefined>;

/** A parsed `WWW-Authenticate` challenge. */
export interface Challenge {
  scheme: string;
  params: Record<string, string>;
}

/** Parse `Bearer realm="…",service="…",scope="…"` (quoted or bare values). */
export function parseChallenge(header: string): Challenge | undefined {
  const m = /^\s*(\w+)\s*(.*)$/s.exec(header);
  if (!m) return undefined;
  const params: Record<string, string> = {};
  const re = /(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))/g;
  for (const p of m[2]!.matchAll(re)) params[p[1]!.toLowerCase()] = p[2] ?? p[3] ?? '';
  return { scheme: m[1]!.toLowerCase(), params };
}

/** `Authorization: Basic …` for credentials. */
export function basicHeader(c: Credentials): string {
  return `Basic ${Buffer.from(`${c.username}:${c.password}`).toString('base64')}`;
}

/** Fetch a bearer token for `scope` from the challenge's realm. */
export async function fetchToken(
  challenge: Challenge,
  scope: string,
  creds: Credentials | undefined,
  signal?: AbortSignal,
): Promise<string> {
  const realm = challenge.params.realm;
  if (!realm) throw unauthorized('its token challenge names no realm');
  const url = new URL(realm);
  if (challenge.params.service) url.searchParams.set('service', challenge.params.service);
  url.searchParams.set('scope', scope);
  const headers: Record<string, string> = {};
  if (creds) headers.authorization = basicHeader(creds);
  let res: Response;
  try {
    res = await fetch(url, { headers, signal });
  } catch (e) {
    throw new ForkdError('registry_unreachable', `the token server ${url.origin} did not answer`, {
      realm,
      cause: String((e as Error).cause ?? e),
    });
  }
  if (res.status === 401 || res.status === 403) {
    await res.body?.cancel();
    throw unauthorized(
      creds
        ? 'its token server refused the credentials'
        : 'its token server wants credentials: run `forkd login`',
    );
  }
  if (!res.ok) {
    await res.body?.cancel();
    throw new ForkdError('registry_unreachable', `the token server answered ${res.status}`, {
      realm,
      status: res.status,
    });
  }
  const body = (await res.json().catch(() => ({}))) as { token?: string; access_token?: string };
  const token = body.token ?? body.access_token;
  if (!token) throw unauthorized('its token server answered without a token');
  return token;
}

export function unauthorized(why: string, details: Record<string, unknown> = {}): ForkdError {
  return new ForkdError('registry_unauthorized', `the registry refused access: ${why}`, details);
}

/** Docker's `config.json` (`DOCKER_CONFIG`, else `~/.docker`): its `auths` entries. */
export async function dockerCredentials(registry: string): Promise<Credentials | undefined> {
  const dir = process.env.DOCKER_CONFIG ?? join(homedir(), '.docker');
  const config = await readJson(join(dir, 'config.json'));
  const auths = (config?.auths ?? {}) as Record<
    string,
    { auth?: string; username?: string; password?: string }
  >;
  for (const [key, entry] of Object.entries(auths)) {
    if (hostOf(key) !== registry) continue;
    if (entry.username && entry.password)
      return { username: entry.username, password: entry.password };
    if (!entry.auth) continue;
    const text = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = text.indexOf(':');
    if (colon > 0) return { username: text.slice(0, colon), password: text.slice(colon + 1) };
  }
  return undefined;
}

/** `https://host/v1/` and `host` both name `host`. */
function hostOf(key: string): string {
  return key.replace(/^https?:\/\//, '').replace(/\/.*$/, '');
}

async function readJson(file: string): Promise<Record<string, unknown> | undefined> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** The first source that has credentials for the registry. */
export function chainCredentials(...sources: CredentialSource[]): CredentialSource {
  return async (registry) => {
    for (const s of sources) {
      const c = await s(registry);
      if (c) return c;
    }
    return undefined;
  };
}
