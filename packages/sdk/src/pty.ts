/**
 * `sandbox.pty`: interactive terminal sessions over the daemon's WebSocket
 * (GET /v1/sandboxes/:id/pty, frames in docs/api.md). A session lives in the guest: closing
 * the handle with `disconnect()` (or losing the connection) leaves it running, and
 * `connect(session, {since})` picks it up again with the output produced meanwhile.
 */
import type { CallOptions } from './client.js';
import { errorFromResponse } from './errors.js';
import type { Transport } from './http.js';
import type { CommandSignal } from './commands.js';
import { WsConnection } from './websocket.js';

/**
 * A terminal's size in character cells.
 *
 * @example
 * await term.resize({ cols: 120, rows: 40 });
 */
export interface PtySize {
  cols: number;
  rows: number;
}

/**
 * How to open a terminal session.
 *
 * @example
 * const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => process.stdout.write(d) });
 */
export interface PtyCreateOptions extends PtySize, CallOptions {
  /** Run by `/bin/sh -c`; default a login shell (bash where the image has it). */
  cmd?: string;
  /** Absolute working directory in the guest. */
  cwd?: string;
  /** User name or uid to run as. */
  user?: string;
  /** TERM in the guest; default `xterm-256color`. */
  term?: string;
  /** Terminal output bytes, as they arrive. */
  onData(data: Uint8Array): void;
  /** A refused frame (a bad resize, say): the session goes on. Default: ignored. */
  onError?(err: Error): void;
}

/**
 * How to reattach a session (after a disconnect or from another process).
 *
 * @example
 * const again = await sbx.pty.connect(term.session, { since: term.offset, onData });
 */
export interface PtyConnectOptions extends CallOptions, Partial<PtySize> {
  /** Replay output from this byte offset (`handle.offset` when it left); default 0. */
  since?: number;
  onData(data: Uint8Array): void;
  onError?(err: Error): void;
}

/**
 * How a terminal session ended.
 *
 * @example
 * const { exitCode } = await term.wait();
 */
export interface PtyExit {
  /** null when a signal ended it. */
  exitCode: number | null;
  signal: string | null;
  durationMs: number;
}

/**
 * `wait()` of a handle whose session was taken over by another connection, or that was
 * disconnected: the session still runs in the sandbox.
 *
 * @example
 * try { await term.wait(); } catch (e) { if (e instanceof PtyDetachedError) console.log(e.session); }
 */
export class PtyDetachedError extends Error {
  constructor(
    readonly session: string,
    why: string,
  ) {
    super(`terminal session ${session} ${why}; reattach with sandbox.pty.connect('${session}')`);
    this.name = 'PtyDetachedError';
  }
}

/**
 * A terminal session the sandbox holds (`sandbox.pty.list()`).
 *
 * @example
 * const detached = (await sbx.pty.list()).filter((s) => !s.attached);
 */
export interface PtySessionInfo {
  /** Its id, `pty-N`: reattach with `sandbox.pty.connect(session)`. */
  session: string;
  pid: number;
  /** A client watches it now. */
  attached: boolean;
  /** Its command ended; a reattach reports the exit. */
  exited: boolean;
  /** Bytes of output produced so far. */
  offset: number;
  ageMs: number;
}

type Query = Record<string, string | number | undefined>;

/**
 * One attachment to a terminal session.
 *
 * @example
 * term.sendInput('ls -l\r');
 * await term.resize({ cols: 100, rows: 30 });
 * await term.kill();
 * console.log(await term.wait()); // { exitCode: null, signal: 'SIGKILL', … }
 */
export class PtyHandle {
  /** Bytes of output the session had produced up to the last one received. */
  offset: number;
  private readonly exit: Promise<PtyExit>;

  /** @internal */
  constructor(
    private readonly ws: WsConnection,
    /** Its id, `pty-N`: keep it to reattach. */
    readonly session: string,
    /** The pid of its command in the guest. */
    readonly pid: number,
    offset: number,
    exit: Promise<PtyExit>,
  ) {
    this.offset = offset;
    this.exit = exit;
    exit.catch(() => undefined);
  }

  /**
   * Type into the terminal (a string is sent as UTF-8): `\r` is Enter, `\x03` Ctrl-C,
   * `\x04` Ctrl-D.
   *
   * @example
   * term.sendInput('echo hi\r');
   */
  sendInput(data: string | Uint8Array): void {
    if (typeof data === 'string') this.ws.sendBinary(Buffer.from(data, 'utf8'));
    else this.ws.sendBinary(data);
  }

  /**
   * Change the window size (the guest's foreground job gets SIGWINCH).
   *
   * @example
   * await term.resize({ cols: 132, rows: 43 });
   */
  async resize(size: PtySize): Promise<void> {
    this.control({ type: 'resize', cols: size.cols, rows: size.rows });
  }

  /**
   * Send a signal to the terminal's foreground job, as a key would.
   *
   * @example
   * await term.signal('SIGINT');
   */
  async signal(signal: CommandSignal): Promise<void> {
    this.control({ type: 'signal', signal });
  }

  /**
   * Hang the terminal up: its shell is killed; `wait()` reports how it ended.
   *
   * @example
   * await term.kill();
   */
  async kill(): Promise<void> {
    this.control({ type: 'kill' });
  }

  /**
   * Resolves when the session's command exits; rejects with PtyDetachedError when this
   * handle lost it while it still runs.
   *
   * @example
   * const { exitCode } = await term.wait();
   */
  wait(): Promise<PtyExit> {
    return this.exit;
  }

  /**
   * Let go of the session without ending it; `connect(session, {since: offset})` resumes.
   *
   * @example
   * term.disconnect();
   */
  disconnect(): void {
    this.control({ type: 'detach' });
    this.ws.close(1000, 'detach');
  }

  private control(msg: Record<string, unknown>): void {
    this.ws.sendText(JSON.stringify(msg));
  }
}

/**
 * The terminal sessions of one sandbox.
 *
 * @example
 * const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => out.push(d) });
 * term.sendInput('exit 3\r');
 * (await term.wait()).exitCode; // 3
 */
export class Pty {
  /** @internal */
  constructor(
    private readonly transport: Transport,
    private readonly base: string,
  ) {}

  /**
   * Open a terminal session running `cmd` (or a login shell).
   *
   * @example
   * const term = await sbx.pty.create({ cols: 80, rows: 24, cmd: 'top', onData });
   */
  create(opts: PtyCreateOptions): Promise<PtyHandle> {
    const { cols, rows, cmd, cwd, user, term } = opts;
    return this.open({ cols, rows, cmd, cwd, user, term }, opts);
  }

  /**
   * Reattach a running session by its id; output since `since` is replayed (as far as the
   * guest still holds it: 128 KiB per session).
   *
   * @example
   * const term = await sbx.pty.connect('pty-1', { since: 0, onData });
   */
  connect(session: string, opts: PtyConnectOptions): Promise<PtyHandle> {
    const { cols, rows, since } = opts;
    return this.open({ session, since, cols, rows }, opts);
  }

  /**
   * The terminal sessions the sandbox holds, attached or not.
   *
   * @example
   * for (const s of await sbx.pty.list()) console.log(s.session, s.attached);
   */
  async list(opts: CallOptions = {}): Promise<PtySessionInfo[]> {
    const wire = await this.transport.json<{
      sessions: {
        session: string;
        pid: number;
        attached: boolean;
        exited: boolean;
        offset: number;
        age_ms: number;
      }[];
    }>({ method: 'GET', path: `${this.base}/pty`, signal: opts.signal });
    return wire.sessions.map(({ age_ms, ...s }) => ({ ...s, ageMs: age_ms }));
  }

  private async open(
    query: Query,
    opts: CallOptions & { onData(d: Uint8Array): void; onError?(e: Error): void },
  ): Promise<PtyHandle> {
    const { socket, head } = await this.transport.upgrade({
      path: `${this.base}/pty`,
      query,
      signal: opts.signal,
    });
    return new Promise<PtyHandle>((resolve, reject) => {
      let handle: PtyHandle | undefined;
      let settle: { resolve(e: PtyExit): void; reject(e: unknown): void } | undefined;
      const exit = new Promise<PtyExit>((res, rej) => (settle = { resolve: res, reject: rej }));
      let session = '';
      const fail = (e: unknown) => {
        if (!handle) reject(e);
        settle?.reject(e);
      };
      const ws = new WsConnection(
        socket,
        {
          onBinary: (data) => {
            if (handle) handle.offset += data.length;
            opts.onData(data);
          },
          onText: (text) => {
            const msg = JSON.parse(text) as Record<string, unknown>;
            if (msg.type === 'ready') {
              session = String(msg.session);
              handle = new PtyHandle(ws, session, Number(msg.pid), Number(msg.offset), exit);
              resolve(handle);
            } else if (msg.type === 'exit') {
              settle?.resolve({
                exitCode: typeof msg.exit_code === 'number' ? msg.exit_code : null,
                signal: typeof msg.signal === 'string' ? msg.signal : null,
                durationMs: Number(msg.duration_ms ?? 0),
              });
            } else if (msg.type === 'detached') {
              fail(new PtyDetachedError(session, 'was attached by another connection'));
            } else if (msg.type === 'error') {
              const err = errorFromResponse(500, msg);
              if (!handle) fail(err);
              else opts.onError?.(err);
            }
          },
          onClose: (code, reason) => {
            const why =
              code === 1006
                ? 'lost its connection to the daemon'
                : `was closed (${code} ${reason})`;
            fail(new PtyDetachedError(session || '(unopened)', why));
          },
        },
        head,
      );
      opts.signal?.addEventListener('abort', () => ws.close(1000, 'aborted'), { once: true });
    });
  }
}
