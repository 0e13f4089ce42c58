/**
 * Bearer-token auth. With tokens configured, every route but /healthz needs
 * `Authorization: Bearer <token>`; the token is compared in constant time (equal-length
 * SHA-256 digests through timingSafeEqual, against every configured token, no early exit).
 * The principal recorded in the audit log is the token's id, or `unix` without auth.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ForkdError } from '../errors.js';
import type { Api } from './types.js';

/** What auth needs from the app options. */
export interface AuthOptions {
  /** token → token id. A non-empty map turns auth on for every route but /healthz. */
  tokens?: Map<string, string>;
  /** True when the daemon listens on TCP: then tokens are mandatory. */
  requireAuth: boolean;
}

/** Principal of requests on an app without tokens (the local unix socket). */
export const UNIX_PRINCIPAL = 'unix';

/**
 * Throws when the listener would be reachable without a token (TCP with no token file).
 * The daemon calls it before listening; buildApp calls it too.
 */
export function assertListenSafe(opts: AuthOptions): void {
  if (opts.requireAuth && (opts.tokens?.size ?? 0) === 0) {
    throw new ForkdError(
      'bad_request',
      'refusing to listen on TCP without a token: configure a token file, or listen on the unix socket only',
    );
  }
}

const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();

/** The id of the token that matches `presented`, checking every token in constant time. */
function matchToken(known: [Buffer, string][], presented: string): string | undefined {
  const d = digest(presented);
  let found: string | undefined;
  for (const [candidate, id] of known) {
    if (timingSafeEqual(candidate, d)) found = id;
  }
  return found;
}

/**
 * A browser cannot set headers on a WebSocket, so a terminal opened by the web UI offers
 * its token as the subprotocol `forkd.bearer.<base64url token>` (as Kubernetes does) beside
 * `forkd`, the one the daemon answers with (the token is never echoed back).
 */
export const WS_PROTOCOL = 'forkd';
export const WS_BEARER_PREFIX = 'forkd.bearer.';

/** The token a WebSocket upgrade carries in Sec-WebSocket-Protocol, if any. */
export function wsBearer(header: string | undefined): string | undefined {
  for (const offered of (header ?? '').split(',')) {
    const p = offered.trim();
    if (p.startsWith(WS_BEARER_PREFIX)) {
      return Buffer.from(p.slice(WS_BEARER_PREFIX.length), 'base64url').toString('utf8');
    }
  }
  return undefined;
}

function bearer(request: FastifyRequest): string | undefined {
  const m = /^Bearer +(\S+) *$/i.exec(request.headers.authorization ?? '');
  if (m || request.headers.upgrade?.toLowerCase() !== 'websocket') return m?.[1];
  return wsBearer(request.headers['sec-websocket-protocol']);
}

/** Adds the auth check to every route of `app` (routes marked `config.public` excepted). */
export function installAuth(app: Api, opts: AuthOptions): void {
  assertListenSafe(opts);
  const known = [...(opts.tokens ?? new Map<string, string>())].map(
    ([token, id]): [Buffer, string] => [digest(token), id],
  );
  app.decorateRequest('principal', known.length ? 'anonymous' : UNIX_PRINCIPAL);
  if (!known.length) return;
  app.addHook('onRequest', async (request) => {
    if (request.routeOptions.config.public) return;
    const token = bearer(request);
    const id = token === undefined ? undefined : matchToken(known, token);
    if (id === undefined) {
      throw new ForkdError(
        'unauthorized',
        token === undefined
          ? 'missing bearer token: send Authorization: Bearer <token> (set FORKD_TOKEN)'
          : 'wrong bearer token: check FORKD_TOKEN against the daemon token file',
      );
    }
    request.principal = id;
  });
}
