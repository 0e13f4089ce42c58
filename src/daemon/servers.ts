/**
 * The daemon's listeners: one Fastify app served on the unix socket (always) and on TCP
 * (plain or TLS, with `--listen`), through Fastify's serverFactory so both share one app,
 * one metrics registry and one audit log. Closing drains in-flight requests up to a
 * deadline, then cuts what is left (a streaming exec that never ends must not hold a
 * shutdown forever).
 */
import {
  createServer as createHttpServer,
  type Server,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { chmod } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance, FastifyServerFactory } from 'fastify';
import { ForkdError } from '../errors.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

export interface TcpOptions {
  host: string;
  port: number;
  tls?: { cert: Buffer; key: Buffer };
}

/** "HOST:PORT" or "[V6]:PORT" → host and port. */
export function parseListen(text: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(text);
  const port = Number(m?.[3]);
  if (!m || port > 65535) {
    throw new ForkdError('bad_request', `--listen ${text} is not HOST:PORT (e.g. 127.0.0.1:7070)`);
  }
  return { host: (m[1] ?? m[2]) as string, port };
}

/** Captures Fastify's request handler so a second server can serve the same app. */
export class Listeners {
  private handler: Handler | undefined;
  private unix: Server | undefined;
  private tcp: Server | undefined;

  readonly serverFactory: FastifyServerFactory = (handler) => {
    this.handler = handler;
    this.unix = createHttpServer(handler);
    return this.unix;
  };

  /** Listen on the socket (0600), then on TCP if asked; returns the TCP address. */
  async listen(
    app: FastifyInstance,
    socket: string,
    tcp?: TcpOptions,
  ): Promise<{ host: string; port: number } | undefined> {
    await app.listen({ path: socket });
    await chmod(socket, 0o600);
    if (!tcp) return undefined;
    const handler = this.handler as Handler;
    this.tcp = tcp.tls ? createHttpsServer(tcp.tls, handler) : createHttpServer(handler);
    const server = this.tcp;
    // WebSocket upgrades (terminal sessions) are served by the app's own server.
    server.on('upgrade', (req, socket, head) => this.unix?.emit('upgrade', req, socket, head));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(tcp.port, tcp.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const addr = server.address();
    return typeof addr === 'object' && addr ? { host: addr.address, port: addr.port } : undefined;
  }

  /** Stop accepting, let in-flight requests finish for up to `drainMs`, then cut them. */
  async close(app: FastifyInstance, drainMs: number): Promise<void> {
    const tcp = this.tcp;
    const tcpClosed = tcp
      ? new Promise<void>((resolve) => tcp.close(() => resolve()))
      : Promise.resolve();
    tcp?.closeIdleConnections();
    const drained = Promise.all([app.close(), tcpClosed]).then(() => true);
    const deadline = sleep(drainMs, false, { ref: false });
    const inTime = await Promise.race([drained, deadline]);
    if (!inTime) {
      this.unix?.closeAllConnections();
      tcp?.closeAllConnections();
      await drained;
    }
  }
}
