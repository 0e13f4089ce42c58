/**
 * `sandbox.commands`: run a command and get its result, or stream its output as it is
 * produced. Without output callbacks `run` uses the buffered exec (one JSON answer); with
 * them, and for `start`, the streaming exec (NDJSON events), whose stdin can stay open and
 * which can be killed by its exec id.
 */
import type { SignalName } from './signals.js';
import type { IncomingMessage } from 'node:http';
import type { CallOptions } from './client.js';
import { errorFromResponse, InternalError } from './errors.js';
import type { Transport } from './http.js';
import { ndjson } from './ndjson.js';
import type { CommandResult } from './types.js';
import { compact, EXEC_RESULT, fromWire, type ExecBody, type ExecEvent } from './wire.js';

/**
 * A signal a command can be sent.
 *
 * @example
 * const sig: CommandSignal = 'SIGTERM';
 * await cmd.kill(sig);
 */
export type CommandSignal = SignalName;

/**
 * How to run a command. A callback that returns a promise holds back further output until
 * it settles (backpressure all the way to the daemon).
 *
 * @example
 * await sandbox.commands.run('make', { cwd: '/src', envs: { CC: 'gcc' }, timeoutMs: 60_000 });
 */
export interface CommandOptions extends CallOptions {
  /** Extra environment variables. */
  envs?: Record<string, string>;
  /** Absolute working directory in the guest. */
  cwd?: string;
  /** User name or uid to run as. */
  user?: string;
  /** Kill the command after this long; the result then has `timedOut: true`. */
  timeoutMs?: number;
  /** Bytes for stdin, followed by end of file. */
  stdin?: string | Uint8Array;
  /** stdout as UTF-8 text, as it arrives (characters split across chunks are kept whole). */
  onStdout?(data: string): void | Promise<void>;
  /** stderr as UTF-8 text, as it arrives. */
  onStderr?(data: string): void | Promise<void>;
  /**
   * Raw output chunks as they arrive, binary-safe. When given, the result's `stdout` and
   * `stderr` stay empty: the caller has the bytes, so the SDK does not keep a second copy.
   */
  onOutput?(stream: 'stdout' | 'stderr', chunk: Uint8Array): void | Promise<void>;
}

/**
 * How to start a command you keep a handle to.
 *
 * @example
 * const cmd = await sandbox.commands.start('cat', { keepStdinOpen: true });
 */
export interface StartOptions extends CommandOptions {
  /** Keep stdin open for `handle.stdin.write()`; `stdin`, if given, is written first. */
  keepStdinOpen?: boolean;
}

/** The daemon's limit on one stdin request's body. */
const STDIN_CHUNK_BYTES = 1024 * 1024;

/** A command line: a string runs as `sh -c STRING`, an array runs as is. */
function argvOf(cmd: string | string[]): string[] {
  return typeof cmd === 'string' ? ['sh', '-c', cmd] : cmd;
}

function toBytes(data: string | Uint8Array): Buffer {
  return typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
}

function execBody(
  cmd: string | string[],
  opts: CommandOptions,
  extra: Partial<ExecBody>,
): ExecBody {
  return compact({
    argv: argvOf(cmd),
    env: opts.envs,
    cwd: opts.cwd,
    user: opts.user,
    timeout_ms: opts.timeoutMs === undefined ? undefined : Math.ceil(opts.timeoutMs),
    stdin: opts.stdin === undefined ? undefined : toBytes(opts.stdin).toString('base64'),
    ...extra,
  });
}

/** Output as it streams: callbacks fed, UTF-8 decoded across chunk borders, bytes kept. */
class OutputSink {
  private readonly decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  private readonly kept: { stdout: Buffer[]; stderr: Buffer[] } = { stdout: [], stderr: [] };

  constructor(private readonly opts: CommandOptions) {}

  async push(stream: 'stdout' | 'stderr', bytes: Buffer): Promise<void> {
    if (this.opts.onOutput) await this.opts.onOutput(stream, bytes);
    else this.kept[stream].push(bytes);
    const text = this.textCallback(stream);
    if (text) {
      const s = this.decoders[stream].decode(bytes, { stream: true });
      if (s) await text(s);
    }
  }

  /** Flush what the decoders still hold (an incomplete last character) and build the result. */
  async finish(exit: Extract<ExecEvent, { type: 'exit' }>): Promise<CommandResult> {
    for (const stream of ['stdout', 'stderr'] as const) {
      const rest = this.textCallback(stream) && this.decoders[stream].decode();
      if (rest) await this.textCallback(stream)?.(rest);
    }
    return {
      ...fromWire(EXEC_RESULT, exit),
      stdout: Buffer.concat(this.kept.stdout).toString('utf8'),
      stderr: Buffer.concat(this.kept.stderr).toString('utf8'),
    };
  }

  private textCallback(stream: 'stdout' | 'stderr') {
    return stream === 'stdout' ? this.opts.onStdout : this.opts.onStderr;
  }
}

/** The typed error an `error` event carries. */
function eventError(ev: Extract<ExecEvent, { type: 'error' }>) {
  return errorFromResponse(500, ev);
}

/**
 * A running command: write to its stdin, signal it, wait for its result.
 *
 * @example
 * const cmd = await sandbox.commands.start('cat', { keepStdinOpen: true, onStdout: console.log });
 * await cmd.stdin.write('hello\n');
 * await cmd.stdin.end();
 * const { exitCode } = await cmd.wait();
 */
export class CommandHandle {
  /**
   * Writes to the command's stdin, in order (needs `keepStdinOpen`).
   *
   * @example
   * await cmd.stdin.write('input');
   */
  readonly stdin: {
    /**
     * Send bytes to stdin.
     *
     * @example
     * await cmd.stdin.write('yes\n');
     */
    write(data: string | Uint8Array, opts?: CallOptions): Promise<void>;
    /**
     * Close stdin (end of file).
     *
     * @example
     * await cmd.stdin.end();
     */
    end(opts?: CallOptions): Promise<void>;
  };
  private readonly result: Promise<CommandResult>;
  private stdinQueue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly transport: Transport,
    private readonly execPath: string,
    /**
     * The exec id the daemon gave this command (its `/execs/:exec_id` routes).
     *
     * @example
     * console.log(cmd.execId); // ex-0123456789ab
     */
    readonly execId: string,
    /**
     * The command's pid inside the guest.
     *
     * @example
     * await sandbox.commands.run(`kill -TERM ${cmd.pid}`);
     */
    readonly pid: number,
    events: AsyncGenerator<ExecEvent>,
    sink: OutputSink,
    signal?: AbortSignal,
  ) {
    this.stdin = {
      write: (data, opts) => this.sendStdin(toBytes(data), false, opts),
      end: (opts) => this.sendStdin(Buffer.alloc(0), true, opts),
    };
    // Aborting the caller's signal ends the stream; the command itself is killed too.
    const onAbort = () => void this.kill('SIGKILL').catch(() => undefined);
    signal?.addEventListener('abort', onAbort, { once: true });
    this.result = pump(events, sink).finally(() => signal?.removeEventListener('abort', onAbort));
    // Nobody may ever call wait(); its failure must not become an unhandled rejection.
    this.result.catch(() => undefined);
  }

  /**
   * Resolves with the result once the command exits.
   *
   * @example
   * const { exitCode, stdout } = await cmd.wait();
   */
  wait(): Promise<CommandResult> {
    return this.result;
  }

  /**
   * Send the command a signal (default SIGKILL); `wait()` then resolves with that signal.
   *
   * @example
   * await cmd.kill('SIGTERM');
   */
  async kill(signal: CommandSignal = 'SIGKILL', opts: CallOptions = {}): Promise<void> {
    await this.transport.bytes({
      method: 'POST',
      path: `${this.execPath}/kill`,
      json: { signal },
      signal: opts.signal,
    });
  }

  /**
   * Stdin requests go one at a time, so bytes arrive in the order they were written, and in
   * pieces the daemon takes (it buffers each stdin request whole).
   */
  private sendStdin(data: Buffer, eof: boolean, opts: CallOptions = {}): Promise<void> {
    const next = this.stdinQueue.then(async () => {
      for (let at = 0; at < data.length; at += STDIN_CHUNK_BYTES) {
        await this.postStdin(data.subarray(at, at + STDIN_CHUNK_BYTES), false, opts);
      }
      if (eof) await this.postStdin(Buffer.alloc(0), true, opts);
    });
    this.stdinQueue = next.catch(() => undefined);
    return next;
  }

  private async postStdin(data: Buffer, eof: boolean, opts: CallOptions): Promise<void> {
    await this.transport.bytes({
      method: 'POST',
      path: `${this.execPath}/stdin`,
      query: { eof: eof || undefined },
      body: data,
      signal: opts.signal,
    });
  }
}

/** Feed the events after `started` to the sink until the exit. */
async function pump(events: AsyncGenerator<ExecEvent>, sink: OutputSink): Promise<CommandResult> {
  for await (const ev of events) {
    if (ev.type === 'stdout' || ev.type === 'stderr') {
      await sink.push(ev.type, Buffer.from(ev.data, 'base64'));
    } else if (ev.type === 'exit') {
      return sink.finish(ev);
    } else if (ev.type === 'error') {
      throw eventError(ev);
    }
  }
  throw new InternalError('the exec stream ended before the command exited; try again');
}

/**
 * The commands of one sandbox (`sandbox.commands`).
 *
 * @example
 * const { stdout } = await sandbox.commands.run('echo hi');
 */
export class Commands {
  constructor(
    private readonly transport: Transport,
    /** `/v1/sandboxes/ID`. */
    private readonly base: string,
  ) {}

  /**
   * Run a command to its end. A string runs as `sh -c STRING`; an array runs as is. A
   * non-zero exit is not an error: look at `exitCode`.
   *
   * @example
   * const r = await sandbox.commands.run('for i in 1 2 3; do echo $i; sleep 1; done', {
   *   onStdout: (s) => process.stdout.write(s),
   * });
   */
  async run(cmd: string | string[], opts: CommandOptions = {}): Promise<CommandResult> {
    if (opts.onStdout || opts.onStderr || opts.onOutput)
      return (await this.start(cmd, opts)).wait();
    const wire = await this.transport.json({
      method: 'POST',
      path: `${this.base}/exec`,
      json: execBody(cmd, opts, {}),
      signal: opts.signal,
    });
    const result = fromWire(EXEC_RESULT, wire);
    return {
      ...result,
      stdout: Buffer.from(result.stdout, 'base64').toString('utf8'),
      stderr: Buffer.from(result.stderr, 'base64').toString('utf8'),
    };
  }

  /**
   * Start a command and return once it runs, with a handle to its stdin, a kill switch and
   * its result. Output streams to the callbacks as it is produced.
   *
   * @example
   * const server = await sandbox.commands.start('python3 -m http.server', { onStderr: console.error });
   * // …
   * await server.kill();
   */
  async start(cmd: string | string[], opts: StartOptions = {}): Promise<CommandHandle> {
    const keepOpen = Boolean(opts.keepStdinOpen);
    const res = await this.transport.send({
      method: 'POST',
      path: `${this.base}/exec`,
      json: execBody(cmd, keepOpen ? { ...opts, stdin: undefined } : opts, {
        stream: true,
        keep_stdin_open: keepOpen || undefined,
      }),
      signal: opts.signal,
    });
    const events = ndjson<ExecEvent>(this.transport.body(res, opts.signal));
    const handle = await this.handleFor(res, events, opts);
    if (keepOpen && opts.stdin !== undefined) await handle.stdin.write(opts.stdin, opts);
    return handle;
  }

  /** Wait for the `started` event and wrap the rest of the stream in a handle. */
  private async handleFor(
    res: IncomingMessage,
    events: AsyncGenerator<ExecEvent>,
    opts: StartOptions,
  ): Promise<CommandHandle> {
    const first = await events.next();
    const ev = first.done ? undefined : first.value;
    if (ev?.type === 'started') {
      const execPath = `${this.base}/execs/${encodeURIComponent(ev.exec_id)}`;
      const sink = new OutputSink(opts);
      return new CommandHandle(
        this.transport,
        execPath,
        ev.exec_id,
        ev.pid,
        events,
        sink,
        opts.signal,
      );
    }
    res.destroy();
    if (ev?.type === 'error') throw eventError(ev);
    throw new InternalError(
      `the exec stream began with ${ev ? `a "${ev.type}" event` : 'nothing'}, not "started"`,
    );
  }
}
