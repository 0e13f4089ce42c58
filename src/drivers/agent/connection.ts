/**
 * One socket to one guest agent: dialling (with retries, since the socket appears only once
 * QEMU listens), the 0xFF + `sync` handshake, request ids, routing replies to their request,
 * per-call deadlines and write backpressure. The typed operations live in client.ts,
 * exec.ts and files.ts; this file knows nothing about what a request means.
 */
import { createConnection, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { agentError, timedOut, unreachable, unsupported, type RequestKind } from './errors.js';
import {
  PROTOCOL_V1_TYPES,
  PROTOCOL_VERSION,
  LineReader,
  encodeLine,
  encodeSync,
  isTerminal,
  parseLine,
  type AgentMessage,
} from './wire.js';

/** Deadline and cancellation of one call; an abort rejects with the signal's reason. */
export interface CallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Whoever waits for the replies of one request id. */
export interface Pending {
  onMessage(msg: AgentMessage): void;
  fail(err: Error): void;
}

/** How to treat the replies of a call made with {@link AgentConnection.call}. */
export interface CallSpec extends CallOptions {
  kind: RequestKind;
  /** Named in error messages (a path, a command). */
  subject?: string;
  /** Non-terminal replies (`data` chunks). */
  onReply?(msg: AgentMessage): void;
}

/** A request in flight: its id (for follow-up messages) and its terminal `result`. */
export interface Call {
  readonly id: number;
  readonly done: Promise<AgentMessage>;
  /** Stop waiting (the agent may still answer; the reply is then ignored). */
  cancel(err: Error): void;
}

/** A promise with its settle functions, for replies that arrive on another code path. */
export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
  readonly settled: boolean;
}

export function deferred<T>(): Deferred<T> {
  let settled = false;
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return {
    promise,
    resolve: (v) => ((settled = true), resolve(v)),
    reject: (e) => ((settled = true), reject(e)),
    get settled() {
      return settled;
    },
  };
}

/** Marks a promise as handled (callers may ignore half of an exec handle) and returns it. */
export function quiet<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}

/** Errors worth another dial: the socket is not there yet or nobody listens yet. */
const RETRYABLE_DIAL = new Set(['ENOENT', 'ECONNREFUSED', 'EAGAIN', 'ECONNRESET']);
const DIAL_RETRY_MS = 50;
/**
 * While connecting, the guest may not have opened its port yet, or (right after a restore)
 * may have missed the first sync: say it again, soon at first and then less often, so a
 * missed sync costs tens of milliseconds, not a second, and a booting guest is not flooded.
 */
const SYNC_RESEND_FIRST_MS = 25;
const SYNC_RESEND_MAX_MS = 1000;

/** Calls `send` after 25, 50, 100 … ms, then every second, until the returned stop is called. */
function resendWithBackoff(send: () => void): () => void {
  let delay = SYNC_RESEND_FIRST_MS;
  let timer: NodeJS.Timeout;
  const arm = () => {
    timer = setTimeout(() => {
      send();
      delay = Math.min(delay * 2, SYNC_RESEND_MAX_MS);
      arm();
    }, delay);
  };
  arm();
  return () => clearTimeout(timer);
}

/** Dials a unix socket until it accepts, the deadline passes, or `signal` aborts. */
export async function dial(path: string, timeoutMs: number, signal?: AbortSignal): Promise<Socket> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    signal?.throwIfAborted();
    try {
      return await dialOnce(path);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
      const left = deadline - Date.now();
      if (!RETRYABLE_DIAL.has(code) || left <= 0) {
        throw unreachable(`to ${path} could not be opened (${code})`, {
          socketPath: path,
          timeoutMs,
        });
      }
      await sleep(Math.min(DIAL_RETRY_MS, left), undefined, { signal }).catch(() => {});
    }
  }
}

function dialOnce(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = createConnection(path);
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
  });
}

/** A random nonce below 2^53, so it survives JSON numbers on both sides exactly. */
function randomNonce(): number {
  return Number(randomBytes(8).readBigUInt64BE() >> 11n);
}

/**
 * Arms a timeout and an abort listener that call `cancel`; returns the disarm function.
 * `onTimeout` builds the error, so a handshake can fail as unreachable and a call as timeout.
 */
function watchdog(
  opts: CallOptions,
  cancel: (err: unknown) => void,
  onTimeout: (ms: number) => Error,
): () => void {
  const { timeoutMs, signal } = opts;
  if (signal?.aborted) {
    cancel(signal.reason);
    return () => {};
  }
  const timer =
    timeoutMs !== undefined && timeoutMs > 0
      ? setTimeout(() => cancel(onTimeout(timeoutMs)), timeoutMs)
      : undefined;
  const onAbort = () => cancel(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  return () => {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  };
}

export class AgentConnection {
  private readonly pending = new Map<number, Pending>();
  private readonly reader: LineReader;
  private readonly closeListeners: ((err?: Error) => void)[] = [];
  private nextId = 1;
  /** Until the current nonce comes back every byte is stale and dropped. */
  private synced = false;
  private nonce: number | undefined;
  private syncWaiter: Deferred<void> | undefined;
  private drainWaiter: Deferred<void> | undefined;
  private socketError: Error | undefined;
  private closed: { err: Error | undefined } | undefined;
  /** The agent's version string from the last sync reply. */
  agentVersion = '';
  /**
   * The request types the agent said it knows at sync; an agent from before that list
   * (frozen inside an old snapshot) knows protocol 1's first inventory.
   */
  agentTypes: ReadonlySet<string> = PROTOCOL_V1_TYPES;

  constructor(
    private readonly socket: Socket,
    private readonly warn: (message: string) => void,
  ) {
    this.reader = new LineReader(
      (line, afterSync) => this.onLine(line, afterSync),
      (bytes) => this.warn(`dropped a ${bytes}-byte line from the guest agent`),
    );
    socket.on('data', (chunk: Buffer) => this.reader.push(chunk));
    socket.on('drain', () => this.drainWaiter?.resolve());
    socket.on('error', (err) => (this.socketError = err));
    socket.on('close', () => this.shutdown(this.socketError ?? new Error('closed by the peer')));
  }

  /**
   * Starts a new session: every request in flight fails (the agent forgets them), then 0xFF +
   * `sync`, then waits for our nonce. Unreachable on timeout, since nothing answered at all.
   */
  async handshake(opts: CallOptions & { resend?: boolean }): Promise<void> {
    this.failAll(unreachable('was reset by a resync; the outcome of requests in flight is unknown'));
    this.reader.reset();
    this.syncWaiter?.reject(unreachable('handshake was superseded by a newer one'));
    const nonce = randomNonce();
    const waiter = deferred<void>();
    this.synced = false;
    this.nonce = nonce;
    this.syncWaiter = waiter;
    const sync = encodeSync(nonce);
    this.write(sync);
    const stopResending = opts.resend
      ? resendWithBackoff(() => this.closed || this.write(sync))
      : undefined;
    const disarm = watchdog(opts, waiter.reject, (ms) =>
      unreachable(`got no answer to sync within ${ms} ms`, { timeoutMs: ms }),
    );
    try {
      await waiter.promise;
    } finally {
      stopResending?.();
      disarm();
      if (this.syncWaiter === waiter) this.syncWaiter = undefined;
    }
  }

  /** Sends a request and routes its replies to `pending`; returns the id it got. */
  open(fields: { type: string } & Record<string, unknown>, pending: Pending): number {
    const { type, ...rest } = fields;
    if (!this.agentTypes.has(type)) throw unsupported(type, this.agentVersion);
    const id = this.nextId++;
    const line = encodeLine({ type, id, ...rest });
    this.write(line);
    this.pending.set(id, pending);
    return id;
  }

  /** A request whose terminal `result` resolves and whose `error` rejects as a catalog error. */
  call(fields: { type: string } & Record<string, unknown>, spec: CallSpec): Call {
    spec.signal?.throwIfAborted();
    const done = deferred<AgentMessage>();
    const id = this.open(fields, {
      onMessage: (msg) => {
        if (msg.type === 'result') done.resolve(msg);
        else if (msg.type === 'error') done.reject(agentError(msg, spec.kind, spec.subject));
        else spec.onReply?.(msg);
      },
      fail: done.reject,
    });
    const cancel = (err: unknown) => {
      this.pending.delete(id);
      done.reject(err);
    };
    const disarm = watchdog(spec, cancel, (ms) => timedOut(`agent ${fields.type}`, ms));
    done.promise.then(disarm, disarm);
    return { id, done: done.promise, cancel };
  }

  /** Sends a message that expects no reply; false when the socket buffer is full. */
  send(fields: { type: string } & Record<string, unknown>): boolean {
    return this.write(encodeLine(fields));
  }

  /** Like {@link send} but waits while the socket buffer is full (bulk data). */
  async sendFlow(fields: { type: string } & Record<string, unknown>): Promise<void> {
    if (!this.send(fields)) await this.drained();
  }

  /** Closes the socket; every request in flight fails with agent_unreachable. */
  close(): void {
    this.socket.destroy();
    this.shutdown(undefined);
  }

  onClose(cb: (err?: Error) => void): void {
    const closed = this.closed;
    if (closed) queueMicrotask(() => cb(closed.err));
    else this.closeListeners.push(cb);
  }

  private write(bytes: Buffer): boolean {
    if (this.closed) throw unreachable('is closed');
    return this.socket.write(bytes);
  }

  private drained(): Promise<void> {
    if (this.closed) return Promise.reject(unreachable('is closed'));
    if (!this.socket.writableNeedDrain) return Promise.resolve();
    if (this.drainWaiter && !this.drainWaiter.settled) return this.drainWaiter.promise;
    this.drainWaiter = deferred<void>();
    return this.drainWaiter.promise;
  }

  private onLine(line: Buffer, afterSync: boolean): void {
    let msg: AgentMessage | undefined;
    try {
      msg = parseLine(line);
    } catch (e) {
      // Before our sync comes back, junk is expected (a stale session's tail).
      if (this.synced) this.warn(`ignored a malformed line from the guest agent: ${String(e)}`);
      return;
    }
    if (msg === undefined) return;
    if (this.synced) this.route(msg);
    else if (afterSync) this.checkSync(msg);
  }

  private checkSync(msg: AgentMessage): void {
    if (msg.type !== 'sync' || msg.nonce !== this.nonce) return;
    if (msg.protocol !== PROTOCOL_VERSION) {
      const err = unreachable(
        `speaks protocol ${String(msg.protocol)} but this forkd speaks protocol ${PROTOCOL_VERSION}; rebuild the guest image with this forkd's agent`,
        { agentProtocol: msg.protocol, hostProtocol: PROTOCOL_VERSION },
      );
      this.syncWaiter?.reject(err);
      return;
    }
    this.synced = true;
    this.nonce = undefined;
    this.agentVersion = typeof msg.agent === 'string' ? msg.agent : '';
    this.agentTypes = Array.isArray(msg.types)
      ? new Set(msg.types.filter((t): t is string => typeof t === 'string'))
      : PROTOCOL_V1_TYPES;
    this.syncWaiter?.resolve();
  }

  private route(msg: AgentMessage): void {
    const id = msg.id;
    if (typeof id !== 'number' || id <= 0) {
      // id 0 is a late sync reply; an id-less error means we sent something it could not read.
      if (msg.type === 'error') {
        this.warn(`guest agent error without a request id: ${String(msg.code)} ${String(msg.message ?? '')}`);
      }
      return;
    }
    const pending = this.pending.get(id);
    if (!pending) return; // a late reply to a call we stopped waiting for
    if (isTerminal(msg)) this.pending.delete(id);
    try {
      pending.onMessage(msg);
    } catch (e) {
      this.warn(`a handler for guest agent request ${id} threw: ${String(e)}`);
    }
  }

  private failAll(err: Error): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) p.fail(err);
  }

  private shutdown(cause: Error | undefined): void {
    if (this.closed) return;
    this.closed = { err: cause };
    const err = unreachable(cause ? `was lost (${cause.message})` : 'was closed');
    this.failAll(err);
    this.syncWaiter?.reject(err);
    this.drainWaiter?.reject(err);
    for (const cb of this.closeListeners.splice(0)) cb(cause);
  }
}
