/**
 * The HTTP layer of the daemon: `buildApp` assembles Fastify with the REST contract's
 * schemas, auth, the one error handler, audit, metrics, the OpenAPI document and one route
 * module per concept. Routes parse and validate, then call the services; nothing here
 * decides anything about sandboxes, snapshots or images. The daemon calls buildApp, then listen().
 */
import Fastify, {
  type FastifyInstance,
  type FastifyServerFactory,
  type FastifyServerOptions,
} from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ForkdError } from '../errors.js';
import type { Services } from '../services/contracts.js';
import { installAudit } from './audit.js';
import { installAuth, type AuthOptions } from './auth.js';
import { frameworkErrors, installErrorHandler } from './errors.js';
import { installMetrics } from './metrics.js';
import { installOpenApi } from './openapi.js';
import { installStrictInput } from './strict.js';
import { branchRoutes } from './routes/branch.js';
import { execRoutes } from './routes/exec.js';
import { contextRoutes } from './routes/contexts.js';
import { fileRoutes } from './routes/files.js';
import { hostRoutes } from './routes/host.js';
import { imageRoutes } from './routes/images.js';
import { buildRoutes } from './routes/builds.js';
import { sandboxRoutes } from './routes/sandboxes.js';
import { snapshotRoutes } from './routes/snapshots.js';
import { packRoutes } from './routes/packs.js';
import { networkRoutes } from './routes/network.js';
import { installWebSocket, ptyRoutes } from './routes/pty.js';
import { eventRoutes } from './routes/events.js';
import { reportRoutes } from './routes/host.js';
import { uiRoutes } from './routes/ui.js';
import { SHARED_SCHEMAS } from '../contract/schemas.js';
import type { Api } from './types.js';
import { phase } from '../util/phases.js';

export { assertListenSafe, type AuthOptions } from './auth.js';

/** JSON bodies; uploads and stdin are raw streams and bounded by their routes instead. */
export const JSON_BODY_LIMIT = 1024 * 1024;

export interface AppOptions extends AuthOptions {
  /** Fastify's logger option (pino options, or false). Default: no logging. */
  logger?: FastifyServerOptions['logger'];
  /**
   * Lets the daemon serve one app on several servers (the unix socket and TCP/TLS): the
   * factory gets Fastify's request handler and returns the server `listen()` uses.
   */
  serverFactory?: FastifyServerFactory;
}

/** One route of an app, as registered: what the OpenAPI route-coverage test compares. */
export interface RouteEntry {
  method: string;
  url: string;
}

const ROUTES = new WeakMap<object, RouteEntry[]>();

/** Every route `app` registered (buildApp's apps only). */
export function routesOf(app: FastifyInstance): RouteEntry[] {
  return [...(ROUTES.get(app) ?? [])];
}

function recordRoutes(app: Api): void {
  const routes: RouteEntry[] = [];
  ROUTES.set(app, routes);
  app.addHook('onRoute', (r) => {
    // Hidden routes (the web UI's static pages) are outside the REST contract.
    if ((r.schema as { hide?: boolean } | undefined)?.hide) return;
    for (const method of [r.method].flat()) routes.push({ method, url: r.url });
  });
}

/**
 * While close() drains in-flight requests, new ones get a catalog 503 with Retry-After
 * (Fastify's own closing answer is not in the catalog's shape).
 */
function refuseWhileClosing(app: Api): void {
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onRequest', async () => {
    if (closing) {
      throw new ForkdError('capacity', 'the daemon is shutting down; retry shortly', {
        retry_after_s: 1,
      });
    }
  });
}

/** Each request's arrival and answer as phase marks (FORKD_PHASES: bench/run-phases.ts). */
function markPhases(app: Api): void {
  if (!process.env.FORKD_PHASES) return;
  const name = (r: { method: string; routeOptions: { url?: string } }) =>
    `api: ${r.method} ${r.routeOptions.url ?? 'unmatched'}`;
  app.addHook('onRequest', async (request) => phase(`${name(request)} in`));
  app.addHook('onResponse', async (request) => phase(`${name(request)} answered`));
}

function createFastify(opts: AppOptions): Api {
  return Fastify({
    logger: opts.logger ?? false,
    serverFactory: opts.serverFactory,
    bodyLimit: JSON_BODY_LIMIT,
    return503OnClosing: false,
    exposeHeadRoutes: false,
    frameworkErrors,
    ajv: {
      // Unknown fields are rejected, never silently dropped; a body's types are never
      // coerced (query strings get their own, narrower coercion in strict.ts).
      customOptions: {
        removeAdditional: false,
        coerceTypes: false,
        useDefaults: false,
        allErrors: false,
      },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();
}

/** The daemon's HTTP app over `services`. Not yet listening (nor ready). */
export async function buildApp(services: Services, opts: AppOptions): Promise<FastifyInstance> {
  const app = createFastify(opts);
  recordRoutes(app);
  // No route takes text/plain; JSON routes take JSON, raw routes add octet-stream.
  app.removeContentTypeParser('text/plain');
  app.decorateRequest('errorCode', null);
  await installWebSocket(app);
  installErrorHandler(app);
  refuseWhileClosing(app);
  markPhases(app);
  installAuth(app, opts);
  installStrictInput(app);
  installAudit(app, services.audit);
  await installOpenApi(app);
  for (const schema of SHARED_SCHEMAS) app.addSchema(schema);
  installMetrics(app, services);
  for (const routes of [
    hostRoutes,
    sandboxRoutes,
    execRoutes,
    fileRoutes,
    imageRoutes,
    snapshotRoutes,
    branchRoutes,
    networkRoutes,
    contextRoutes,
    ptyRoutes,
    packRoutes,
    buildRoutes,
    eventRoutes,
    reportRoutes,
    uiRoutes,
  ]) {
    await app.register(routes, { services });
  }
  return app as unknown as FastifyInstance;
}
