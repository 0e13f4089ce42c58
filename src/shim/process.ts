/**
 * One process of a task — the container's own (init) or an exec — run inside the task's
 * sandbox through the daemon's streamed exec: its output copied to the FIFOs containerd
 * gave, its exit status kept for Wait, State and the exit event. The guest pid is the
 * process's pid as containerd sees it.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { constants } from 'node:fs';
import { constants as os } from 'node:os';
import {
  isForkdError,
  type Commands,
  type CommandHandle,
  type CommandResult,
  type CommandSignal,
} from '@forkd/sdk';
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
const SIGNALS = new Map<number, CommandSignal>(
  (
    [
      'SIGKILL',
      'SIGTERM',
      'SIGINT',
      'SIGHUP',
      'SIGQUIT',
      'SIGUSR1',
      'SIGUSR2',
      'SIGSTOP',
      'SIGCONT',
    ] as const
  ).map((name) => [os.signals[name], name]),
);

/** The exit status of a result: the code, or 128 + the signal that ended it. */
function exitStatus(r: CommandResult): number {
  if (r.exitCode !== null) return r.exitCode;
  const signo = r.signal ? os.signals[r.signal as keyof typeof os.signals] : undefined;
  return 128 + (signo ?? os.signals.SIGKILL);
}

/**
 * A FIFO containerd reads, opened for writing (its reader is open already). Once the
 * reader is gone (`ctr run -d` exits after Start), output is dropped: the process runs on,
 * as it would with nobody reading its logs.
 */
async function openWriter(
  path: string,
): Promise<{ write(b: Uint8Array): Promise<void>; close(): Promise<void> } | undefined> {
  if (!path) return undefined;
  const fh: FileHandle = await open(path, constants.O_WRONLY);
  let broken = false;
  return {
    write: async (b) => {
      if (broken) return;
      await fh.write(b).catch(() => (broken = true));
    },
    close: () => fh.close(),
  };
}

export class TaskProcess {
  pid = 0;
  status: number = STATUS.created;
  exitStatus = 0;
  exitedAt: number | undefined;
  private handle: CommandHandle | undefined;
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
  ) {
    if (io.terminal || spec.terminal) {
      throw new TtrpcError(
        CODE.unimplemented,
        'forkd runs processes without a terminal so far: run it without -t (issue 30)',
      );
    }
  }

  /** Start it in the sandbox of `commands`; resolves with its pid once it runs. */
  async start(commands: Commands): Promise<number> {
    if (this.status !== STATUS.created) {
      throw new TtrpcError(CODE.failedPrecondition, `process ${this.name} was already started`);
    }
    const [stdout, stderr] = await Promise.all([
      openWriter(this.io.stdout),
      openWriter(this.io.stderr),
    ]);
    try {
      this.handle = await commands.start(this.spec.args, {
        envs: this.spec.env,
        cwd: this.spec.cwd,
        user: this.spec.user,
        onOutput: (stream, chunk) => (stream === 'stdout' ? stdout : stderr)?.write(chunk),
      });
    } catch (e) {
      await Promise.all([stdout?.close(), stderr?.close()]);
      throw e;
    }
    this.pid = this.handle.pid;
    this.status = STATUS.running;
    void this.handle
      .wait()
      .then(exitStatus, (e: unknown) => {
        this.log(`process ${this.name} lost: ${(e as Error).message}`);
        return 128 + os.signals.SIGKILL;
      })
      .then(async (status) => {
        await Promise.all([stdout?.close(), stderr?.close()]).catch(() => undefined);
        this.exit(status);
      });
    return this.pid;
  }

  /**
   * Send signal number `signo`. A process not started yet ends at once with 128 + signo;
   * one that has exited is NotFound, as in containerd's own shims.
   */
  async kill(signo: number): Promise<void> {
    const name = SIGNALS.get(signo);
    if (!name) {
      throw new TtrpcError(
        CODE.invalidArgument,
        `signal ${signo} cannot be sent to a forkd process: use one of ${[...SIGNALS.keys()].join(', ')}`,
      );
    }
    if (this.status === STATUS.stopped) {
      throw new TtrpcError(CODE.notFound, `process ${this.name} has already exited`);
    }
    if (!this.handle) return this.exit(128 + signo);
    try {
      await this.handle.kill(name);
    } catch (e) {
      // It exited while the signal travelled: the same answer as above.
      if (isForkdError(e, 'exec_not_found')) {
        throw new TtrpcError(CODE.notFound, `process ${this.name} has already exited`);
      }
      throw e;
    }
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
