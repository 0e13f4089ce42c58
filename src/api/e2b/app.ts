/**
 * The E2B-compatible listener (`forkd daemon --e2b-listen HOST:PORT`): one Fastify app that
 * answers the unmodified `e2b` SDK on one address for both of its base URLs — the control
 * plane (E2B_API_URL: /sandboxes, /v2/sandboxes) and every sandbox's envd (E2B_SANDBOX_URL,
 * which makes the SDK name the sandbox in an `E2b-Sandbox-Id` header): Connect-RPC JSON for
 * process.Process and filesystem.Filesystem, /files and /health. It is a route layer like
 * api/routes: it parses E2B's shapes, calls the same service interfaces and maps the answers
 * back; the services decide. docs/e2b.md is the user's side of it.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import { ForkdError } from '../../errors.js';
import type { GuestUserT } from '../../contract/schemas.js';
import type { Services } from '../../services/contracts.js';
import { installAudit } from '../audit.js';
import type { Api } from '../types.js';
import { controlRoutes } from './control.js';
import { filesystemRoutes } from './filesystem.js';
import { installPauseGate, PauseGate } from './pause.js';
import { processRoutes } from './process.js';
import { templateRoutes } from './templates.js';
import { installSignedUrls } from './signing.js';
import { CONNECT_STATUS, connectError, e2bError, fromE2bId, toE2bId } from './wire.js';

/** JSON bodies of the control plane and of unary RPCs. */
const JSON_LIMIT = 1024 * 1024;
/** A multipart upload is buffered whole (the SDK buffers it too): bound it. */
export const MULTIPART_LIMIT = 256 * 1024 * 1024;

export interface E2bAppOptions {
  /** forkd's tokens (token → id): an E2B API key must be one of them. */
  tokens?: Map<string, string>;
  logger?: FastifyServerOptions['logger'];
  /** Where Template.build's uploaded COPY archives are kept (default: under the temp dir). */
  templateFiles?: string;
}

/** Which side of E2B a route belongs to, for auth and the error shape. */
export type Plane = 'control' | 'envd' | 'rpc' | 'public';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The E2B listener's routes: control plane, envd REST, envd RPC, or no auth (health). */
    plane?: Plane;
  }
}

/** What the routes need besides the services: the sandbox a request is for, its envd token. */
export interface E2bContext {
  services: Services;
  /** The forkd id of the sandbox an envd request names (E2b-Sandbox-Id). */
  sandboxOf(request: FastifyRequest): string;
  /** The envd access token the create/connect answers hand out. */
  accessToken(id: string): string;
  /**
   * Who an envd request acts as: the user it names (Basic auth on RPCs, `username` on
   * /files), else the sandbox's default user; with that user's home.
   */
  who(request: FastifyRequest): Promise<GuestUserT>;
  /** The sandboxes E2B's pause holds until connect() (pause.ts). */
  pauses: PauseGate;
}

/** The user an envd request names: `Authorization: Basic base64(user:)` or `?username=`. */
export function userOf(request: FastifyRequest): string | undefined {
  const q = (request.query as Record<string, unknown> | undefined)?.username;
  if (typeof q === 'string' && q) return q;
  const m = /^Basic\s+(\S+)$/i.exec(request.headers.authorization ?? '');
  if (!m?.[1]) return undefined;
  const user = Buffer.from(m[1], 'base64').toString('utf8').split(':')[0];
  return user || undefined;
}

/** How long a resolved guest user is reused (a call per file request would read passwd). */
const WHO_TTL_MS = 10_000;

function makeWho(services: Services): E2bContext['who'] {
  const cache = new Map<string, { at: number; user: Promise<GuestUserT> }>();
  return (request) => {
    const sandbox = sandboxOf(request);
    const user = userOf(request);
    const key = `${sandbox}/${user ?? ''}`;
    const hit = cache.get(key);
    if (hit && Date.now() - hit.at < WHO_TTL_MS) return hit.user;
    for (const [k, v] of cache) if (Date.now() - v.at >= WHO_TTL_MS) cache.delete(k);
    const resolved = services.sandboxes.guestUser(sandbox, user);
    resolved.catch(() => cache.delete(key));
    cache.set(key, { at: Date.now(), user: resolved });
    return resolved;
  };
}

const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();

function sameSecret(a: string, b: string): boolean {
  return timingSafeEqual(digest(a), digest(b));
}

/**
 * Auth: the control plane takes one of forkd's tokens as `X-API-KEY`; envd requests take
 * the sandbox's access token as `X-Access-Token` — an HMAC of the sandbox id keyed by the
 * tokens, so only a caller that created or connected with a key has it, and it survives a
 * daemon restart while the token file stays the same.
 */
function makeAuth(tokens: Map<string, string> | undefined) {
  const known = [...(tokens ?? new Map<string, string>())];
  const key = known.length
    ? digest(
        known
          .map(([t]) => t)
          .sort()
          .join('\n'),
      )
    : undefined;
  // `<e2b id>.<hmac>`: the id names the sandbox for clients that send no E2b-Sandbox-Id.
  const accessToken = (id: string): string =>
    key ? `${toE2bId(id)}.${createHmac('sha256', key).update(id).digest('hex')}` : toE2bId(id);
  const principalOf = (apiKey: string | undefined): string | undefined => {
    let found: string | undefined;
    for (const [token, id] of known) {
      if (apiKey !== undefined && sameSecret(token, apiKey)) found = id;
    }
    return found;
  };
  return { enabled: known.length > 0, accessToken, principalOf };
}

const header = (request: FastifyRequest, name: string): string | undefined => {
  const v = request.headers[name];
  return Array.isArray(v) ? v[0] : v;
};

/**
 * The sandbox an envd request is for: the E2b-Sandbox-Id header, or (SDKs before 2.8 send
 * it on RPCs only) the sandbox id that leads its access token.
 */
function sandboxOf(request: FastifyRequest): string {
  const id = header(request, 'e2b-sandbox-id') ?? header(request, 'x-access-token')?.split('.')[0];
  if (!id) {
    throw new ForkdError(
      'bad_request',
      'no E2b-Sandbox-Id header: point E2B_SANDBOX_URL at this listener (docs/e2b.md)',
    );
  }
  return fromE2bId(id);
}

function installAuthHook(app: Api, auth: ReturnType<typeof makeAuth>): void {
  app.decorateRequest('principal', auth.enabled ? 'anonymous' : 'unix');
  app.addHook('onRequest', async (request) => {
    const plane = request.routeOptions.config.plane;
    if (!auth.enabled || plane === 'public' || plane === undefined) return;
    if (plane === 'control') {
      const id = auth.principalOf(header(request, 'x-api-key'));
      if (id === undefined) {
        throw new ForkdError(
          'unauthorized',
          'wrong or missing API key: set E2B_API_KEY to a token from the daemon token file',
        );
      }
      request.principal = id;
      return;
    }
    const id = sandboxOf(request);
    const presented = header(request, 'x-access-token') ?? '';
    if (!sameSecret(presented, auth.accessToken(id))) {
      throw new ForkdError(
        'unauthorized',
        'wrong or missing envd access token: connect to the sandbox with Sandbox.connect()',
      );
    }
    request.principal = `e2b:${id}`;
  });
}

/** Errors in the shape of the route's side: E2B's `{code, message}` or a Connect error. */
function installErrors(app: Api): void {
  const answer = (err: unknown, request: FastifyRequest, reply: FastifyReply) => {
    const rpc = request.routeOptions.config?.plane === 'rpc';
    const status = rpc ? CONNECT_STATUS[connectError(err).code] : e2bError(err).status;
    if (status >= 500) request.log.error({ err }, 'e2b listener answered an error');
    request.errorCode = rpc ? connectError(err).code : String(e2bError(err).body.code);
    return reply.code(status).send(rpc ? connectError(err) : e2bError(err).body);
  };
  app.setErrorHandler((err, request, reply) => answer(err, request, reply));
  app.setNotFoundHandler((request, reply) =>
    answer(
      new ForkdError(
        'not_found',
        `forkd's E2B listener has no ${request.method} ${request.url.split('?')[0]?.slice(0, 100)} (docs/e2b.md lists what it serves)`,
      ),
      request,
      reply,
    ),
  );
}

/** Bodies: JSON (empty allowed: the SDK posts some without one), Connect envelopes, uploads. */
function installParsers(app: Api): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(
    'application/json',
    { parseAs: 'buffer', bodyLimit: JSON_LIMIT },
    (_request, body: Buffer, done) => {
      try {
        done(null, body.length ? JSON.parse(body.toString('utf8')) : {});
      } catch {
        done(new ForkdError('bad_request', 'the body is not JSON'), undefined);
      }
    },
  );
  app.addContentTypeParser(
    'application/connect+json',
    { parseAs: 'buffer', bodyLimit: JSON_LIMIT },
    (_request, body, done) => done(null, body),
  );
  app.addContentTypeParser(
    'multipart/form-data',
    { parseAs: 'buffer', bodyLimit: MULTIPART_LIMIT },
    (_request, body, done) => done(null, body),
  );
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) =>
    done(null, payload),
  );
}

/** The listener's app over `services`; not yet listening. */
export async function buildE2bApp(
  services: Services,
  opts: E2bAppOptions = {},
): Promise<FastifyInstance> {
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: JSON_LIMIT,
    exposeHeadRoutes: false,
    return503OnClosing: false,
  }) as unknown as Api;
  const auth = makeAuth(opts.tokens);
  app.decorateRequest('errorCode', null);
  installErrors(app);
  installSignedUrls(app, services, auth.accessToken);
  installAuthHook(app, auth);
  installAudit(app, services.audit);
  installParsers(app);
  const ctx: E2bContext = {
    services,
    sandboxOf,
    accessToken: auth.accessToken,
    who: makeWho(services),
    pauses: new PauseGate(services),
  };
  installPauseGate(app, ctx.pauses, sandboxOf);
  for (const routes of [controlRoutes, processRoutes, filesystemRoutes]) {
    await app.register(routes, { ctx });
  }
  const filesDir = opts.templateFiles ?? join(tmpdir(), 'forkd-e2b-template-files');
  await app.register(templateRoutes, { ctx, filesDir });
  return app as unknown as FastifyInstance;
}
