/**
 * The SDK's only door to the daemon: one HTTP request over a unix socket or TCP (node:http,
 * node:https; global fetch cannot dial a unix socket). Error responses become the catalog's
 * typed errors, a daemon that cannot be dialled becomes DaemonUnreachableError saying how to
 * start one, and an AbortSignal ends the request and its response body alike.
 */
import { createHash, randomBytes } from 'node:crypto';
import * as http from 'node:http';
import type * as Https from 'node:https';
import { createRequire } from 'node:module';
import { Readable, type Duplex } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ResolvedConfig } from './config.js';
import { DaemonUnreachableError, errorFromResponse, ForkdError } from './errors.js';
import { VERSION } from './version.js';
import { WS_GUID } from './websocket.js';

/**
 * node:https (TLS, crypto) is loaded only by a client of an https:// daemon: on the local
 * socket it would be a good part of a short CLI call's start-up.
 */
let https: typeof Https | undefined;
function httpsModule(): typeof Https {
  return (https ??= createRequire(import.meta.url)('node:https') as typeof Https);
}

/** Keep-alive pools shared by every client (they key connections by host or socket path). */
const AGENTS: { http: http.Agent; https?: Https.Agent } = {
  http: new http.Agent({ keepAlive: true }),
};

function agentFor(kind: 'http' | 'https'): http.Agent {
  if (kind === 'http') return AGENTS.http;
  return (AGENTS.https ??= new (httpsModule().Agent)({ keepAlive: true }));
}

/** Error bodies larger than this are cut: we only need the JSON error. */
const ERROR_BODY_LIMIT = 64 * 1024;

/** One request: a path under the daemon's root, a query, and at most one kind of body. */
export interface RequestSpec {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  query?: Record<string, string | number | boolean | undefined>;
  /** Sent as application/json. */
  json?: unknown;
  /** Sent as application/octet-stream; a Readable is streamed, never buffered. */
  body?: Uint8Array | Readable;
  signal?: AbortSignal;
}

/** An AbortSignal's reason, or a generic AbortError when it has none. */
function abortReason(signal: AbortSignal | undefined): unknown {
  return signal?.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/** The headers and bytes a spec sends. */
function encodeBody(spec: RequestSpec): {
  headers: Record<string, string>;
  payload?: Uint8Array | Readable;
} {
  if (spec.json !== undefined) {
    const payload = Buffer.from(JSON.stringify(spec.json));
    return {
      headers: {
        'content-type': 'application/json',
        'content-length': String(payload.byteLength),
      },
      payload,
    };
  }
  if (spec.body instanceof Readable) {
    return { headers: { 'content-type': 'application/octet-stream' }, payload: spec.body };
  }
  if (spec.body !== undefined) {
    return {
      headers: {
        'content-type': 'application/octet-stream',
        'content-length': String(spec.body.byteLength),
      },
      payload: spec.body,
    };
  }
  return { headers: {} };
}

function queryString(query: RequestSpec['query']): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) params.set(k, String(v));
  const s = params.toString();
  return s ? `?${s}` : '';
}

/**
 * Sends requests to one daemon. Methods resolve with a 2xx response or throw a ForkdError
 * (or the AbortSignal's reason).
 *
 * @example
 * const t = new Transport(resolveConfig());
 * const health = await t.json<{ status: string }>({ method: 'GET', path: '/healthz' });
 */
export class Transport {
  constructor(readonly config: ResolvedConfig) {}

  /**
   * Send a request and resolve with its response once the status says success; the body is
   * left unread for the caller, and the signal keeps governing it until it ends.
   */
  async send(spec: RequestSpec): Promise<http.IncomingMessage> {
    spec.signal?.throwIfAborted();
    const { headers, payload } = encodeBody(spec);
    let req = this.request(spec, headers);
    let res: http.IncomingMessage;
    try {
      res = await this.exchange(req, spec.signal, payload);
    } catch (e) {
      if (!(payload instanceof Readable) && closedWhileIdle(req, e)) {
        req = this.request(spec, headers);
        res = await this.exchange(req, spec.signal, payload);
      } else throw e;
    }
    const status = res.statusCode ?? 0;
    if (status >= 200 && status < 300) return res;
    const error = await this.errorOf(res, spec.signal);
    // A rejected upload may still be streaming: this connection cannot be reused.
    if (payload instanceof Readable) req.destroy();
    throw error;
  }

  /**
   * Open a WebSocket (a GET with Upgrade): resolves with the upgraded socket and the bytes
   * that came with the 101, or throws the catalog error the daemon answered instead.
   */
  upgrade(
    spec: Pick<RequestSpec, 'path' | 'query' | 'signal'>,
  ): Promise<{ socket: Duplex; head: Buffer }> {
    spec.signal?.throwIfAborted();
    const key = randomBytes(16).toString('base64');
    const headers = {
      connection: 'Upgrade',
      upgrade: 'websocket',
      'sec-websocket-version': '13',
      'sec-websocket-key': key,
    };
    const req = this.request({ ...spec, method: 'GET' }, headers, false);
    const accept = createHash('sha1')
      .update(key + WS_GUID)
      .digest('base64');
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        req.destroy();
        reject(abortReason(spec.signal));
      };
      spec.signal?.addEventListener('abort', onAbort, { once: true });
      const done = () => spec.signal?.removeEventListener('abort', onAbort);
      req.once('upgrade', (res, socket, head) => {
        done();
        if (res.headers['sec-websocket-accept'] === accept) return resolve({ socket, head });
        socket.destroy();
        reject(
          this.failure(
            new Error('bad Sec-WebSocket-Accept'),
            spec.signal,
            'answered a WebSocket wrongly',
          ),
        );
      });
      req.once('response', (res) => {
        done();
        // A refused upgrade's connection is not reusable: close it once the error is read.
        const close = (e: unknown) => {
          req.destroy();
          reject(e);
        };
        this.errorOf(res, spec.signal).then(close, close);
      });
      req.once('error', (e) => {
        done();
        reject(this.failure(e, spec.signal));
      });
      req.end();
    });
  }

  /** Send, then parse the JSON answer (undefined for an empty body). */
  async json<T>(spec: RequestSpec): Promise<T> {
    const text = (await this.bytes(spec)).toString('utf8');
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** Send, then collect the whole answer. */
  async bytes(spec: RequestSpec): Promise<Buffer> {
    const res = await this.send(spec);
    return this.readAll(res, spec.signal);
  }

  /** Read a response body to its end, with broken connections turned into ForkdErrors. */
  async readAll(
    res: http.IncomingMessage,
    signal?: AbortSignal,
    limit = Infinity,
  ): Promise<Buffer> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of this.body(res, signal)) {
      if (size >= limit) break;
      chunks.push(chunk);
      size += chunk.length;
    }
    return Buffer.concat(chunks);
  }

  /** A response body's chunks, with broken connections turned into ForkdErrors. */
  async *body(res: http.IncomingMessage, signal?: AbortSignal): AsyncGenerator<Buffer> {
    try {
      for await (const chunk of res) yield chunk as Buffer;
    } catch (e) {
      throw this.failure(e, signal, 'broke while reading the answer');
    }
    // A response cut short without an error event (the daemon died mid-answer).
    if (!res.complete) throw this.failure(undefined, signal, 'closed the answer early');
  }

  /**
   * What a failed dial or a broken connection means to the caller: the abort reason when
   * the caller aborted, the error itself when it is already typed, else DaemonUnreachable.
   */
  failure(e: unknown, signal: AbortSignal | undefined, what = 'could not be reached'): unknown {
    if (signal?.aborted) return abortReason(signal);
    if (e instanceof ForkdError) return e;
    const code = (e as NodeJS.ErrnoException | undefined)?.code;
    const why = e instanceof Error ? e.message : 'no more data';
    return new DaemonUnreachableError(
      `the forkd daemon at ${this.config.url} ${what} (${why}): ${hint(code)}`,
      { url: this.config.url, ...(code ? { errno: code } : {}) },
      { cause: e },
    );
  }

  /** `pooled` false: a connection of its own (an upgraded socket never goes back to a pool). */
  private request(
    spec: RequestSpec,
    headers: Record<string, string>,
    pooled = true,
  ): http.ClientRequest {
    const ep = this.config.endpoint;
    const path = spec.path + queryString(spec.query);
    const common = {
      method: spec.method,
      headers: {
        accept: 'application/json',
        'user-agent': `forkd-sdk/${VERSION}`,
        ...(this.config.token ? { authorization: `Bearer ${this.config.token}` } : {}),
        ...headers,
      },
    };
    if (ep.kind === 'unix') {
      // An empty servername (TLS only) spares node's agent its IP-address check, whose
      // regular expressions cost a short CLI call several ms to compile.
      const unix = {
        ...common,
        socketPath: ep.socketPath,
        path,
        agent: pooled ? AGENTS.http : false,
      };
      return http.request({ ...unix, servername: '' } as http.RequestOptions);
    }
    const mod = ep.kind === 'https' ? httpsModule() : http;
    return mod.request({
      ...common,
      host: ep.host,
      port: ep.port,
      path: ep.basePath + path,
      agent: pooled ? agentFor(ep.kind) : false,
    });
  }

  /**
   * Write the body and wait for the response head. The abort listener stays until the
   * response body is done, so aborting also ends a body being read.
   */
  private exchange(
    req: http.ClientRequest,
    signal: AbortSignal | undefined,
    payload: Uint8Array | Readable | undefined,
  ): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      let res: http.IncomingMessage | undefined;
      const onAbort = () => {
        const reason = abortReason(signal);
        req.destroy(reason as Error);
        res?.destroy(reason as Error);
        reject(reason);
      };
      const done = () => signal?.removeEventListener('abort', onAbort);
      signal?.addEventListener('abort', onAbort, { once: true });
      req.once('response', (r) => {
        res = r;
        r.once('close', done);
        resolve(r);
      });
      req.once('error', (e) => {
        done();
        reject(this.failure(e, signal));
      });
      if (payload instanceof Readable) {
        // Errors of the upload reach us through req's 'error' (pipeline destroys req).
        pipeline(payload, req).catch(() => undefined);
      } else {
        req.end(payload);
      }
    });
  }

  /** The typed error of a non-2xx response. */
  private async errorOf(res: http.IncomingMessage, signal?: AbortSignal): Promise<ForkdError> {
    const status = res.statusCode ?? 0;
    const text = (await this.readAll(res, signal, ERROR_BODY_LIMIT)).toString('utf8');
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    const retryAfter = Number(res.headers['retry-after']);
    const retryAfterMs = Number.isFinite(retryAfter) ? retryAfter * 1000 : undefined;
    return errorFromResponse(status, body, { retryAfterMs });
  }
}

/**
 * A kept-alive connection the daemon closed as idle just as this request went out on it
 * (its FIN crossed our write): the daemon read none of it, so sending it again on a new
 * connection is safe, and node's documentation advises exactly that.
 */
function closedWhileIdle(req: http.ClientRequest, e: unknown): boolean {
  const code = ((e as { cause?: NodeJS.ErrnoException }).cause ?? {}).code;
  return req.reusedSocket && (code === 'ECONNRESET' || code === 'EPIPE');
}

/** What to do about a connection error, by errno. */
function hint(code: string | undefined): string {
  switch (code) {
    case 'EACCES':
    case 'EPERM':
      return 'this user may not open its socket; run as the user the daemon runs as, or set FORKD_URL';
    case 'ECONNREFUSED':
    case 'ENOENT':
    case 'ENOTFOUND':
      return 'start it with `forkd daemon`, or set FORKD_URL to where one listens';
    default:
      return 'check that `forkd daemon` is running (`curl --unix-socket … /healthz`), or set FORKD_URL';
  }
}
