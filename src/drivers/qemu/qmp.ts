/**
 * QMP client: one connection to a QEMU monitor socket, commands matched to replies by
 * id, asynchronous events delivered to listeners, every command bounded by a timeout.
 */
import { connect, type Socket } from 'node:net';
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { ForkdError } from '../../errors.js';

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  timestamp?: { seconds: number; microseconds: number };
}

interface Pending {
  resolve(v: unknown): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
  command: string;
}

/** A connected, capability-negotiated QMP session. */
export class QmpClient extends EventEmitter {
  private buf = '';
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();
  private closed = false;

  private constructor(private readonly socket: Socket) {
    super();
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => this.onData(d));
    socket.on('close', () => this.onClose());
    socket.on('error', () => undefined);
  }

  /**
   * Connect to a QMP unix socket, retrying until QEMU listens (it creates the socket
   * during start-up), then negotiate capabilities.
   */
  static async connect(path: string, opts: { timeoutMs?: number } = {}): Promise<QmpClient> {
    const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
    for (;;) {
      try {
        const socket = await openSocket(path);
        const client = new QmpClient(socket);
        await client.handshake(Math.max(1000, deadline - Date.now()));
        return client;
      } catch (e) {
        if (Date.now() >= deadline) {
          throw new ForkdError('boot_failed', `QEMU monitor did not answer at ${path}`, {
            cause: e instanceof Error ? e.message : String(e),
          });
        }
        await sleep(10);
      }
    }
  }

  private handshake(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no QMP greeting')), timeoutMs);
      this.once('greeting', () => {
        clearTimeout(timer);
        this.execute('qmp_capabilities', undefined, { timeoutMs }).then(() => resolve(), reject);
      });
    });
  }

  /** Run a QMP command; resolves with its `return` value, rejects with its error text. */
  execute<T = unknown>(
    command: string,
    args?: Record<string, unknown>,
    opts: { timeoutMs?: number } = {},
  ): Promise<T> {
    if (this.closed) return Promise.reject(monitorGone(command));
    const id = `f${this.nextId++}`;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ForkdError('timeout', `QEMU did not answer ${command} in time`));
      }, opts.timeoutMs ?? 10_000);
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, command });
      const msg: Record<string, unknown> = { execute: command, id };
      if (args) msg.arguments = args;
      this.socket.write(JSON.stringify(msg) + '\n');
    });
  }

  /** Wait for the next event of a given name (or time out). */
  waitEvent(name: string, timeoutMs = 10_000): Promise<QmpEvent> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.off('event', on);
        reject(new ForkdError('timeout', `QEMU event ${name} did not arrive in time`));
      }, timeoutMs);
      const on = (ev: QmpEvent) => {
        if (ev.event !== name) return;
        clearTimeout(timer);
        this.off('event', on);
        resolve(ev);
      };
      this.on('event', on);
    });
  }

  /** Close the connection; pending commands fail. */
  close(): void {
    this.socket.destroy();
  }

  private onData(d: string): void {
    this.buf += d;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl).trim();
      this.buf = this.buf.slice(nl + 1);
      if (line) this.onMessage(line);
    }
  }

  private onMessage(line: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    if ('QMP' in msg) return void this.emit('greeting', msg.QMP);
    if (typeof msg.event === 'string') return void this.emit('event', msg as unknown as QmpEvent);
    const p = typeof msg.id === 'string' ? this.pending.get(msg.id) : undefined;
    if (!p) return;
    this.pending.delete(msg.id as string);
    clearTimeout(p.timer);
    if ('error' in msg) {
      const err = msg.error as { class?: string; desc?: string };
      p.reject(new ForkdError('internal', `QEMU ${p.command} failed: ${err.desc ?? err.class}`));
    } else p.resolve(msg.return);
  }

  private onClose(): void {
    this.closed = true;
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(monitorGone(p.command));
      this.pending.delete(id);
    }
    this.emit('close');
  }
}

function monitorGone(command: string): ForkdError {
  return new ForkdError('internal', `QEMU monitor closed before ${command} finished`);
}

function openSocket(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(path);
    s.once('connect', () => {
      s.off('error', reject);
      resolve(s);
    });
    s.once('error', reject);
  });
}
