/**
 * Signed file URLs (`sandbox.uploadUrl()` / `downloadUrl()`): a plain `GET`/`POST /files`
 * that carries no sandbox header and no access token, only `signature` (and
 * `signature_expiration`), so a browser or `curl` can use it. The signature is envd's:
 * `v1_` + base64(sha256("path:operation:user:accessToken[:expiration]")), without padding.
 * The URL names no sandbox either (E2B_SANDBOX_URL is one address for all of them), so
 * the sandbox is the one whose access token makes the signature; the request then goes on
 * as if it had sent that sandbox's id and token.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ForkdError } from '../../errors.js';
import type { Services } from '../../services/contracts.js';
import type { Api } from '../types.js';
import { toE2bId } from './wire.js';

/** envd's signature of a file operation (`read` or `write`) for `user` ('' for none). */
export function fileSignature(
  path: string,
  operation: 'read' | 'write',
  user: string,
  accessToken: string,
  expiration?: number,
): string {
  const raw = [
    path,
    operation,
    user,
    accessToken,
    ...(expiration === undefined ? [] : [expiration]),
  ];
  const hash = createHash('sha256').update(raw.join(':'), 'utf8').digest('base64');
  return `v1_${hash.replace(/=+$/, '')}`;
}

const same = (a: string, b: string): boolean =>
  a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));

function expirationOf(raw: unknown): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n)) {
    throw new ForkdError('bad_request', 'signature_expiration: must be a Unix time in seconds');
  }
  return n;
}

/** The sandbox whose access token signed this request, checked for expiry. */
async function signer(
  request: FastifyRequest,
  signature: string,
  services: Services,
  accessToken: (id: string) => string,
): Promise<{ id: string; token: string }> {
  const q = request.query as Record<string, unknown>;
  const path = typeof q.path === 'string' ? q.path : '';
  const user = typeof q.username === 'string' ? q.username : '';
  const operation = request.method === 'GET' ? 'read' : 'write';
  const expiration = expirationOf(q.signature_expiration);
  for (const s of await services.sandboxes.list({ state: 'running' })) {
    const token = accessToken(s.id);
    if (!same(fileSignature(path, operation, user, token, expiration), signature)) continue;
    if (expiration !== undefined && expiration * 1000 < Date.now()) {
      throw new ForkdError('unauthorized', 'signature is already expired');
    }
    return { id: s.id, token };
  }
  throw new ForkdError(
    'unauthorized',
    'invalid signature: make the URL with uploadUrl()/downloadUrl() of a running sandbox',
  );
}

/** Before auth: a signed /files request gets its sandbox's id and token. */
export function installSignedUrls(
  app: Api,
  services: Services,
  accessToken: (id: string) => string,
): void {
  app.addHook('onRequest', async (request) => {
    if (request.routeOptions.url !== '/files') return;
    const signature = (request.query as Record<string, unknown>).signature;
    if (typeof signature !== 'string' || request.headers['x-access-token'] !== undefined) return;
    const { id, token } = await signer(request, signature, services, accessToken);
    request.headers['e2b-sandbox-id'] = toE2bId(id);
    request.headers['x-access-token'] = token;
  });
}
