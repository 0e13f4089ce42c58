/**
 * One QEMU process: start it, talk to its monitor, notice when it dies, end it. Knows
 * nothing of sandboxes or HTTP; the sandbox service decides when to call what.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { open, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { ForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { buildQemuArgs, vmFiles, type VmSpec } from './cmdline.js';
import { QmpClient } from './qmp.js';

export const QEMU_BINARY = process.env.FORKD_QEMU ?? 'qemu-system-x86_64';

/** Create the VM's qcow2 overlay over a backing file (raw image or frozen qcow2 layer). */
export async function createOverlay(
  overlay: string,
  backing: string,
  backingFormat: 'raw' | 'qcow2',
): Promise<void> {
  await run('qemu-img', [
    'create',
    '-q',
    '-f',
    'qcow2',
    '-F',
    backingFormat,
    '-b',
    backing,
    overlay,
  ]);
}

/** A running QEMU process and its monitor connection. */
export class Vm {
  private exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private exitInfo?: { code: number | null; signal: NodeJS.Signals | null };

  private constructor(
    readonly spec: VmSpec,
    private readonly child: ChildProcess,
    readonly qmp: QmpClient,
  ) {
    this.exited = new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) {
        resolve({ code: child.exitCode, signal: child.signalCode });
      }
      child.once('exit', (code, signal) => resolve({ code, signal }));
    });
    void this.exited.then((info) => (this.exitInfo = info));
  }

  /** The host pid of QEMU. */
  get pid(): number {
    return this.child.pid as number;
  }

  /** Paths of the VM's sockets and logs. */
  get files(): ReturnType<typeof vmFiles> {
    return vmFiles(this.spec.dir);
  }

  /** True while the QEMU process runs. */
  get alive(): boolean {
    return this.exitInfo === undefined;
  }

  /** Resolves when QEMU exits, however that happens. */
  waitExit(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    return this.exited;
  }

  /**
   * Start QEMU for a spec and connect to its monitor. QEMU's own stderr goes to qemu.log;
   * if it exits during start-up the error says why (its last log lines).
   */
  static async start(spec: VmSpec): Promise<Vm> {
    const files = vmFiles(spec.dir);
    const log = await open(files.log, 'a');
    let child: ChildProcess;
    let spawned: Promise<void>;
    try {
      child = spawn(QEMU_BINARY, buildQemuArgs(spec), {
        stdio: ['ignore', log.fd, log.fd],
        detached: true, // own process group: a Ctrl-C on the CLI reaches forkd, which ends QEMU itself
      });
      spawned = whenSpawned(child); // listen before any await: 'spawn' fires on the next tick
    } finally {
      await log.close();
    }
    await spawned;
    const died = new Promise<never>((_, reject) => {
      child.once(
        'exit',
        () =>
          void tail(files.log).then((t) =>
            reject(new ForkdError('boot_failed', `QEMU exited during start-up: ${t}`)),
          ),
      );
    });
    try {
      const qmp = await Promise.race([QmpClient.connect(files.qmp), died]);
      return new Vm(spec, child, qmp);
    } catch (e) {
      killGroup(child);
      throw e;
    }
  }

  /** Reject with `boot_failed` (console tail included) if QEMU exits before `p` settles. */
  async guard<T>(p: Promise<T>, what: string): Promise<T> {
    const died = this.exited.then(async () => {
      const consoleTail = await tail(this.files.console);
      throw new ForkdError('boot_failed', `the VM stopped while ${what}: ${consoleTail}`, {
        console: consoleTail,
      });
    });
    return Promise.race([p, died]);
  }

  /** End QEMU: `quit` over QMP, then SIGKILL if it lingers. Idempotent. */
  async kill(graceMs = 1000): Promise<void> {
    if (this.alive) {
      await this.qmp.execute('quit', undefined, { timeoutMs: graceMs }).catch(() => undefined);
      const done = await Promise.race([
        this.exited.then(() => true),
        sleep(graceMs).then(() => false),
      ]);
      if (!done) {
        killGroup(this.child);
        await this.exited;
      }
    }
    this.qmp.close();
  }
}

function whenSpawned(child: ChildProcess): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (e: NodeJS.ErrnoException) =>
      reject(
        e.code === 'ENOENT'
          ? new ForkdError(
              'setup_required',
              `${QEMU_BINARY} is not installed; run \`forkd doctor\``,
            )
          : e,
      ),
    );
  });
}

function killGroup(child: ChildProcess): void {
  try {
    if (child.pid) process.kill(-child.pid, 'SIGKILL');
  } catch {
    child.kill('SIGKILL');
  }
}

/** The last lines of a log file, for error messages. */
export async function tail(path: string, lines = 15): Promise<string> {
  const text = await readFile(path, 'utf8').catch(() => '');
  return text.replace(/\r/g, '').trim().split('\n').slice(-lines).join('\n') || '(empty log)';
}
