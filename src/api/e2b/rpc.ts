/**
 * Connect-RPC routes over Fastify: a unary method is `POST /<package.Service>/<Method>`
 * with a JSON message both ways (errors through the app's handler, in Connect's shape); a
 * server-streaming method takes one enveloped message and answers HTTP 200 with
 * enveloped messages, then an end-of-stream envelope carrying the error if there was one.
 * Streams send a keepalive message every `Keepalive-Ping-Interval` seconds when the SDK
 * asks for it, so idle proxies and the SDK's own idle timeouts do not cut a quiet command.
 */
import type { FastifyRequest } from 'fastify';
import type { Api } from '../types.js';
import {
  ConnectFailure,
  endEnvelope,
  envelope,
  objectField,
  parseEnvelope,
  parseJson,
} from './wire.js';

type Message = Record<string, unknown>;

export type UnaryHandler = (msg: Message, request: FastifyRequest) => Promise<unknown>;

/** One open server stream: send messages; `closed` resolves when the client went away. */
export interface StreamOut {
  send(message: unknown): void;
  closed: Promise<void>;
  isClosed(): boolean;
}

/** Runs until the stream is done; throwing ends it with that error. */
export type StreamHandler = (
  msg: Message,
  out: StreamOut,
  request: FastifyRequest,
) => Promise<void>;

const KEEPALIVE_HEADER = 'keepalive-ping-interval';
const KEEPALIVE_MAX_S = 300;

function messageOf(body: unknown): Message {
  const msg = Buffer.isBuffer(body) ? parseJson(body) : (body ?? {});
  return objectField(msg, 'request');
}

export function unary(app: Api, path: string, handler: UnaryHandler): void {
  app.post(path, { config: { plane: 'rpc' } }, async (request, reply) => {
    const answer = await handler(messageOf(request.body), request);
    return reply.type('application/json').send(answer ?? {});
  });
}

function keepaliveSeconds(request: FastifyRequest): number | undefined {
  const n = Number(request.headers[KEEPALIVE_HEADER]);
  return Number.isFinite(n) && n >= 1 ? Math.min(n, KEEPALIVE_MAX_S) : undefined;
}

/** `keepalive` is the message a quiet stream sends, e.g. `{event: {keepalive: {}}}`. */
export function serverStream(
  app: Api,
  path: string,
  keepalive: unknown,
  handler: StreamHandler,
): void {
  app.post(path, { config: { plane: 'rpc' } }, async (request, reply) => {
    const raw = reply.raw;
    reply.hijack();
    raw.writeHead(200, { 'content-type': 'application/connect+json' });
    let closed = false;
    const closedP = new Promise<void>((resolve) =>
      raw.once('close', () => {
        closed = true;
        resolve();
      }),
    );
    const out: StreamOut = {
      send: (m) => {
        if (!closed) raw.write(envelope(m));
      },
      closed: closedP,
      isClosed: () => closed,
    };
    const every = keepaliveSeconds(request);
    const timer = every ? setInterval(() => out.send(keepalive), every * 1000) : undefined;
    let failure: unknown;
    try {
      if (!Buffer.isBuffer(request.body)) {
        throw new ConnectFailure('invalid_argument', 'a stream takes application/connect+json');
      }
      const msg = objectField(parseEnvelope(request.body), 'request');
      await handler(msg, out, request);
    } catch (err) {
      failure = err;
      request.log.info({ err }, 'e2b stream ended with an error');
    } finally {
      clearInterval(timer);
      if (!closed) raw.end(endEnvelope(failure));
    }
  });
}
