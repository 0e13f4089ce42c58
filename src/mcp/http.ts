/**
 * `/mcp` on the daemon: the MCP server over streamable HTTP (the official SDK's transport),
 * one session per client, behind the daemon's bearer-token check like every REST route.
 *
 * The tools reach the services through the TypeScript SDK over the daemon's own unix
 * socket, with the caller's token, rather than through an in-process adapter: stdio and
 * HTTP then run the very same tool code, and every tool call is a REST request that the
 * routes validate, authorise, audit (under the caller's token id) and count in the metrics
 * like any other; an adapter would have to redo the routes' mapping from service results
 * to the SDK's shapes, and bypass all of that. The cost is a local socket round trip per call.
 *
 * A session belongs to the token that opened it: another token gets the same 404 as an
 * unknown session. Sessions end on DELETE, after `idleMs` without a request, and when the
 * daemon closes; at most `maxSessions` are open at once (`capacity` beyond).
 */
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ForkdError } from '@forkd/sdk';

export interface McpRouteOptions {
  /** Where the tools send their REST calls: the daemon's own socket, `unix:/…`. */
  daemonUrl: string;
  /** Open sessions at most (default 64). */
  maxSessions?: number;
  /** A session with no request for this long is closed (default 30 min). */
  idleMs?: number;
}

interface Session {
  transport: StreamableHTTPServerTransport;
  principal: string;
  idle?: NodeJS.Timeout;
}

/** The route's path. */
export const MCP_PATH = '/mcp';

/**
 * The MCP SDK and the tools, loaded at the first session: they cost the daemon's start
 * about a second of CPU under TCG-loaded hosts, and most daemons never serve /mcp.
 */
let loaded:
  | Promise<
      [
        typeof import('@modelcontextprotocol/sdk/server/streamableHttp.js'),
        typeof import('./server.js'),
      ]
    >
  | undefined;
const loadMcp = () =>
  (loaded ??= Promise.all([
    import('@modelcontextprotocol/sdk/server/streamableHttp.js'),
    import('./server.js'),
  ]));

/** An initialize request opens a session (the transport checks the rest of it). */
function isInitialize(body: unknown): boolean {
  return (body as { method?: unknown } | undefined)?.method === 'initialize';
}

function bearer(request: FastifyRequest): string | undefined {
  return /^Bearer +(\S+) *$/i.exec(request.headers.authorization ?? '')?.[1];
}

function principalOf(request: FastifyRequest): string {
  return (request as { principal?: string }).principal ?? 'unix';
}

class Sessions {
  private readonly open = new Map<string, Session>();

  constructor(private readonly opts: Required<McpRouteOptions>) {}

  /** The session a request names, if it is the caller's. */
  find(request: FastifyRequest, id: string): Session {
    const session = this.open.get(id);
    if (!session || session.principal !== principalOf(request)) {
      throw new ForkdError(
        'not_found',
        `no MCP session ${id}: it ended or never existed; initialize a new one`,
        { session: id },
      );
    }
    this.touch(id, session);
    return session;
  }

  /** A new session for an initialize request, with the caller's token for its tools. */
  async start(request: FastifyRequest): Promise<Session> {
    if (this.open.size >= this.opts.maxSessions) {
      throw new ForkdError(
        'capacity',
        `${this.open.size} MCP sessions are open (the most this daemon keeps); close one or retry later`,
        { retry_after_s: 5 },
      );
    }
    const [{ StreamableHTTPServerTransport }, { createMcpServer }] = await loadMcp();
    const session: Session = {
      principal: principalOf(request),
      transport: new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => {
          this.open.set(id, session);
          this.touch(id, session);
        },
        onsessionclosed: (id) => this.forget(id),
      }),
    };
    session.transport.onclose = () => {
      if (session.transport.sessionId) this.forget(session.transport.sessionId);
    };
    const server = createMcpServer({ url: this.opts.daemonUrl, token: bearer(request) });
    await server.connect(session.transport);
    return session;
  }

  async closeAll(): Promise<void> {
    const all = [...this.open.values()];
    this.open.clear();
    await Promise.all(all.map((s) => s.transport.close().catch(() => undefined)));
  }

  private touch(id: string, session: Session): void {
    clearTimeout(session.idle);
    session.idle = setTimeout(() => {
      this.forget(id);
      session.transport.close().catch(() => undefined);
    }, this.opts.idleMs).unref();
  }

  private forget(id: string): void {
    clearTimeout(this.open.get(id)?.idle);
    this.open.delete(id);
  }
}

async function handle(sessions: Sessions, request: FastifyRequest, reply: FastifyReply) {
  const id = request.headers['mcp-session-id'];
  let session: Session;
  if (typeof id === 'string') session = sessions.find(request, id);
  else if (request.method === 'POST' && isInitialize(request.body)) {
    session = await sessions.start(request);
  } else {
    throw new ForkdError(
      'bad_request',
      'no Mcp-Session-Id header: open a session with an initialize request first',
      { field: 'mcp-session-id' },
    );
  }
  reply.hijack();
  await session.transport.handleRequest(request.raw, reply.raw, request.body);
}

/**
 * Serves MCP at /mcp on `app` (after buildApp, so the app's auth, audit and limits apply).
 *
 * @example
 * const app = await buildApp(services, opts);
 * await installMcp(app, { daemonUrl: `unix:${socket}` });
 */
export async function installMcp(app: FastifyInstance, opts: McpRouteOptions): Promise<void> {
  const sessions = new Sessions({ maxSessions: 64, idleMs: 30 * 60_000, ...opts });
  // Before the listeners drain: an open event stream would otherwise hold the close.
  app.addHook('preClose', async () => {
    await sessions.closeAll();
  });
  app.route({
    method: ['GET', 'POST', 'DELETE'],
    url: MCP_PATH,
    // The body is MCP's JSON-RPC, checked by the MCP transport, not by a route schema.
    config: { rawBody: true },
    handler: (request, reply) => handle(sessions, request, reply),
  });
}
