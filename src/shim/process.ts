/**
 * One process of a task — the container's own (init) or an exec — run inside the task's
 * sandbox through the daemon's streamed exec, or on a terminal session when containerd
 * asks for one (`ctr run -t`): its output copied to the FIFOs containerd gave, its stdin
 * FIFO forwarded, its exit status kept for Wait, State and the exit event. The guest pid is
 * the process's pid as containerd sees it.
 */
import { constants, openSync } from 'node:fs';
import { Socket } from 'node:net';
import { constants as os } from 'node:os';
import {
  isForkdError,
  SIGNALS,
  type Commands,
  type CommandHandle,
  type CommandSignal,
  type Sandbox,
} from '@forkd/sdk';
import { shellCommand } from '../util/shell-words.js';
import type { ProcessSpec } from './bundle.js';
import { CODE, TtrpcError } from './ttrpc.js';

/** containerd's process states (`containerd.v1.types.Status`). */
export const STATUS = { created: 1, running: 2, stopped: 3, paused: 4 } as const;

/** The FIFO paths containerd gave for a process (empty: none). */
export interface ProcessIO {
  stdin: string;
  stdout: string;
  stderr: string;
  terminal: boolean;
}

/** Signals the daemon's exec kill takes, by number. */
const SIGNAL_BY_NUMBER = new Map<number, CommandSignal>(
  SIGNALS.map((name) => [os.signals[name], name]),
);

/** How a process ended, from an exec or a terminal session. */
interface Ended {
  exitCode: number | null;
  signal: string | null;
}

/** A started process, exec or terminal (or a pod's VM): what the task service asks of it. */
export interface Running {
  pid: number;
  wait(): Promise<Ended>;
  signal(name: CommandSignal): Promise<void>;
  resize?(cols: number, rows: number): Promise<void>;
}

/** The size of a terminal until containerd's first ResizePty. */
const TERMINAL_SIZE = { cols: 80, rows: 24 };

/** The exit status of a result: the code, or 128 + the signal that ended it. */
function exitStatus(r: Ended): number {
  if (r.exitCode !== null) return r.exitCode;
  const signo = r.signal ? os.signals[r.signal as keyof typeof os.signals] : undefined;
  return 128 + (signo ?? os.signals.SIGKILL);
}

/** Where a process's output goes: a FIFO containerd reads. */
interface Output {
  write(b: Uint8Array): Promise<void>;
  close(): Promise<void>;
}

/**
 * A FIFO containerd reads, opened for writing without waiting and written in the event
 * loop, with backpressure to the exec stream. If nobody reads it (no reader at Start, or
 * `ctr run -d` gone since), output is dropped: the process runs on, as it would with nobody
 * reading its logs.
 */
function openWriter(path: string): Output | undefined {
  if (!path) return undefined;
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_NONBLOCK);
  } catch {
    return undefined; // ENXIO: no reader
  }
  const socket = new Socket({ fd, readable: false, writable: true });
  let broken = false;
  socket.on('error', () => (broken = true));
  return {
    write: (b) =>
      new Promise((resolve) => {
        if (broken || socket.destroyed) return resolve();
        socket.write(b, (e) => {
          if (e) broken = true;
          resolve();
        });
      }),
    close: () =>
      new Promise((resolve) => {
        if (socket.destroyed) return resolve();
        socket.once('close', () => resolve());
        socket.end();
      }),
  };
}

/**
 * The stdin FIFO, read as a stream in the event loop. Opened without waiting: a client
 * that will write has its write end open already (ctr opens it before Create and waits in
 * open(2) for a reader, which counts as a writer), and one whose input was empty has come
 * and gone, so the first read is end of file — as it should be.
 */
function openReader(path: string): Socket | undefined {
  if (!path) return undefined;
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  return new Socket({ fd, readable: true, writable: false });
}

/** Copy the FIFO into the process's stdin until end of file, then close it. */
async function forward(from: Socket, to: CommandHandle): Promise<void> {
  try {
    for await (const chunk of from) await to.stdin.write(chunk as Buffer);
    await to.stdin.end();
  } catch {
    from.destroy(); // the process exited before reading it all: not an error of ours
  }
}

export class TaskProcess {
  pid = 0;
  status: number = STATUS.created;
  exitStatus = 0;
  exitedAt: number | undefined;
  private running: Running | undefined;
  private settle!: () => void;
  /** Resolves once the process has exited and its output is flushed. */
  readonly exited = new Promise<void>((resolve) => (this.settle = resolve));

  constructor(
    /** The exec id; empty for the init process. */
    readonly execId: string,
    readonly spec: ProcessSpec,
    readonly io: ProcessIO,
    private readonly onExit: (p: TaskProcess) => void,
    private readonly log: (msg: string) => void,
    /** How it starts, when not as an exec or terminal of `spec` (a pod's VM). */
    private readonly launch?: () => Promise<Running>,
    /** Called when its stream is lost, before its exit: the VM may be what ended. */
    private readonly onLost?: () => Promise<void>,
  ) {}

  /**
   * Start it in `sandbox` (undefined: a pod's that has no VM yet, where only its own
   * `launch` starts); resolves with its pid once it runs.
   */
  async start(sandbox: Sandbox | undefined): Promise<number> {
    if (this.status !== STATUS.created) {
      throw new TtrpcError(CODE.failedPrecondition, `process ${this.name} was already started`);
    }
    const stdin = openReader(this.io.stdin);
    const stdout = openWriter(this.io.stdout);
    const stderr = openWriter(this.io.stderr);
    try {
      this.running = await this.begin(sandbox, stdin, stdout, stderr);
    } catch (e) {
      stdin?.destroy();
      await Promise.all([stdout?.close(), stderr?.close()]);
      throw e;
    }
    this.pid = this.running.pid;
    this.status = STATUS.running;
    void this.running
      .wait()
      .then(exitStatus, async (e: unknown) => {
        this.log(`process ${this.name} lost: ${(e as Error).message}`);
        await this.onLost?.().catch(() => undefined);
        return 128 + os.signals.SIGKILL;
      })
      .then(async (status) => {
        stdin?.destroy();
        await Promise.all([stdout?.close(), stderr?.close()]).catch(() => undefined);
        this.exit(status);
      });
    return this.pid;
  }

  /** Its launch, or an exec or terminal session of `spec` in `sandbox`. */
  private async begin(
    sandbox: Sandbox | undefined,
    stdin: Socket | undefined,
    stdout: Output | undefined,
    stderr: Output | undefined,
  ): Promise<Running> {
    if (this.launch) return this.launch();
    if (!sandbox) {
      throw new TtrpcError(
        CODE.failedPrecondition,
        `process ${this.name} has no VM to run in: a pod without forkd.dev/snapshot gets one when its first container starts`,
      );
    }
    return this.io.terminal || this.spec.terminal
      ? this.startTerminal(sandbox, stdin, stdout)
      : this.startExec(sandbox.commands, stdin, stdout, stderr);
  }

  private async startExec(
    commands: Commands,
    stdin: Socket | undefined,
    stdout: Output | undefined,
    stderr: Output | undefined,
  ): Promise<Running> {
    const handle = await commands.start(this.spec.args, {
      envs: this.spec.env,
      cwd: this.spec.cwd,
      user: this.spec.user,
      keepStdinOpen: stdin !== undefined,
      onOutput: (stream, chunk) => (stream === 'stdout' ? stdout : stderr)?.write(chunk),
    });
    if (stdin) void forward(stdin, handle);
    return { pid: handle.pid, wait: () => handle.wait(), signal: (name) => handle.kill(name) };
  }

  /** On a terminal session: one output stream (stdout), stdin as the terminal's input. */
  private async startTerminal(
    sandbox: Sandbox,
    stdin: Socket | undefined,
    stdout: Output | undefined,
  ): Promise<Running> {
    const pty = await sandbox.pty.create({
      ...TERMINAL_SIZE,
      cmd: shellCommand(this.spec.args, this.spec.env),
      cwd: this.spec.cwd,
      user: this.spec.user,
      term: this.spec.env.TERM,
      onData: (data) => void stdout?.write(data),
    });
    stdin?.on('data', (chunk: Buffer) => pty.sendInput(chunk));
    stdin?.on('error', () => undefined);
    return {
      pid: pty.pid,
      wait: () => pty.wait(),
      signal: (name) => pty.signal(name),
      resize: (cols, rows) => pty.resize({ cols, rows }),
    };
  }

  /** ResizePty: the terminal's new size (a process without one has nothing to resize). */
  async resize(cols: number, rows: number): Promise<void> {
    if (cols > 0 && rows > 0) await this.running?.resize?.(cols, rows);
  }

  /**
   * Send signal number `signo`. A process not started yet ends at once with 128 + signo;
   * one that has exited is NotFound, as in containerd's own shims.
   */
  async kill(signo: number): Promise<void> {
    const name = SIGNAL_BY_NUMBER.get(signo);
    if (!name) {
      throw new TtrpcError(
        CODE.invalidArgument,
        `signal ${signo} cannot be sent to a forkd process: use one of ${[...SIGNAL_BY_NUMBER.keys()].join(', ')}`,
      );
    }
    if (this.status === STATUS.stopped) {
      throw new TtrpcError(CODE.notFound, `process ${this.name} has already exited`);
    }
    if (!this.running) return this.exit(128 + signo);
    try {
      await this.running.signal(name);
    } catch (e) {
      // It exited while the signal travelled: the same answer as above.
      if (isForkdError(e, 'exec_not_found')) {
        throw new TtrpcError(CODE.notFound, `process ${this.name} has already exited`);
      }
      throw e;
    }
  }

  /** Its VM ended under it: it has exited, killed (the exec stream may say so later). */
  vmEnded(): void {
    this.exit(128 + os.signals.SIGKILL);
  }

  private exit(status: number): void {
    if (this.status === STATUS.stopped) return;
    this.status = STATUS.stopped;
    this.exitStatus = status;
    this.exitedAt = Date.now();
    this.onExit(this);
    this.settle();
  }

  private get name(): string {
    return this.execId || 'init';
  }
}
