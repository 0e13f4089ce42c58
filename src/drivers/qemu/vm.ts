/**
 * One QEMU process: start it, talk to its monitor, notice when it dies, end it. Knows
 * nothing of sandboxes or HTTP; the sandbox service decides when to call what.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chown, copyFile, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ForkdError, isForkdError } from '../../errors.js';
import { buildQemuArgs, deviceSetOf, vmFiles, type VmSpec } from './cmdline.js';
import { confineVm, type VmConfinement } from './confine.js';
import { QmpClient } from './qmp.js';
import { launcherPrefix, qemuEnv, vmTuning } from './tuning.js';
import type { CpuTimes, VmExit, VmHandle } from '../vmm.js';
import { phase } from '../../util/phases.js';

/** The fd number a restore's device state has inside QEMU (see {@link Vm.start}). */
export const INCOMING_FD = 3;

export const QEMU_BINARY = process.env.FORKD_QEMU ?? 'qemu-system-x86_64';
/** The kernel's flag for a task that has begun to exit (include/linux/sched.h). */
const PF_EXITING = 0x4;

export type { VmExit } from '../vmm.js';

/**
 * The QEMU process behind a Vm: either our child, or one adopted after a daemon restart,
 * which we can only watch by pid.
 */
interface VmProcess {
  readonly pid: number;
  readonly exited: Promise<VmExit>;
  /** SIGKILL the process group, only while it is still that QEMU. */
  forceKill(): void;
  /** Stop watching (the process keeps running). */
  release(): void;
}

/** A QEMU we spawned: exit status from the ChildProcess. */
class ChildVmProcess implements VmProcess {
  readonly exited: Promise<VmExit>;

  constructor(private readonly child: ChildProcess) {
    this.exited = new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) {
        resolve({ code: child.exitCode, signal: child.signalCode });
      }
      child.once('exit', (code, signal) => resolve({ code, signal }));
    });
  }

  get pid(): number {
    return this.child.pid as number;
  }

  forceKill(): void {
    killGroup(this.child);
  }

  release(): void {
    // Nothing to stop: the child is unref'd, so it holds no handle on our event loop.
  }
}

/**
 * A QEMU spawned by an earlier daemon: it is not our child, so there is no exit event.
 * Polled by pid (and checked at once when its monitor socket closes); every check re-reads
 * /proc/PID/cmdline, so a pid recycled by another process counts as exited.
 */
class AdoptedVmProcess implements VmProcess {
  readonly exited: Promise<VmExit>;
  private resolveExit!: (e: VmExit) => void;
  private readonly timer: NodeJS.Timeout;
  private gone = false;

  constructor(
    readonly pid: number,
    private readonly dir: string,
    pollMs: number,
  ) {
    this.exited = new Promise((resolve) => (this.resolveExit = resolve));
    this.timer = setInterval(() => void this.check(), pollMs);
    this.timer.unref();
  }

  /** Resolve `exited` if the process is gone. */
  async check(): Promise<void> {
    if (this.gone || (await isQemuOf(this.pid, this.dir))) return;
    this.gone = true;
    clearInterval(this.timer);
    this.resolveExit({ code: null, signal: null });
  }

  forceKill(): void {
    if (this.gone || !isQemuOfSync(this.pid, this.dir)) return;
    signalGroup(this.pid, 'SIGKILL');
  }

  release(): void {
    clearInterval(this.timer);
  }
}

/** Each Vm's monitor connection, reachable only through {@link monitor}. */
const monitors = new WeakMap<Vm, QmpClient>();

/**
 * The QMP connection of a Vm, for the modules of drivers/qemu (disk layers, capture) that
 * speak QMP themselves. Everything else uses Vm's methods: lint forbids this import
 * outside drivers/qemu (eslint.config.js).
 */
export function monitor(vm: Vm): QmpClient {
  return monitors.get(vm) as QmpClient;
}

/** What QEMU says the guest is doing (QMP `query-status`), e.g. `running`, `paused`. */
export type VmStatus = string;

/** A running QEMU process and its monitor connection. */
export class Vm implements VmHandle {
  private exitInfo?: VmExit;
  private readonly qmp: QmpClient;

  private constructor(
    readonly spec: VmSpec,
    private readonly proc: VmProcess,
    qmp: QmpClient,
  ) {
    this.qmp = qmp;
    monitors.set(this, qmp);
    void proc.exited.then((info) => (this.exitInfo = info));
  }

  /** Stop the guest's vCPUs (QMP `stop`): no CPU used, memory and devices kept. */
  async pause(): Promise<void> {
    await this.qmp.execute('stop');
  }

  /** Run a paused guest again (QMP `cont`). */
  async resume(): Promise<void> {
    await this.qmp.execute('cont');
  }

  /** The guest's run state as QEMU reports it. */
  async status(): Promise<VmStatus> {
    return (await this.qmp.execute<{ status: string }>('query-status')).status;
  }

  /**
   * Save the device state (no RAM) of a stopped VM into `file` (~14 KB, 2–4 ms). A
   * confined QEMU may write only in its own directory: it saves there, and the file moves
   * to `file` (same filesystem) as ours.
   */
  async saveDeviceState(file: string): Promise<void> {
    const own = join(this.spec.dir, 'vmstate.saving');
    await this.qmp.execute('xen-save-devices-state', { filename: own, live: false });
    await chown(own, process.getuid?.() ?? 0, process.getgid?.() ?? 0);
    await rename(own, file).catch(async (e: NodeJS.ErrnoException) => {
      if (e.code !== 'EXDEV') throw e;
      await copyFile(own, file);
      await rm(own, { force: true });
    });
  }

  /** The host pid of QEMU. */
  get pid(): number {
    return this.proc.pid;
  }

  /** Paths of the VM's sockets and logs. */
  get files(): ReturnType<typeof vmFiles> {
    return vmFiles(this.spec.dir);
  }

  /** True while the QEMU process runs. */
  get alive(): boolean {
    return this.exitInfo === undefined;
  }

  /**
   * Whether QEMU is gone, asked of the kernel: just after a SIGKILL `alive` may still say
   * true (the exit is noticed a moment later) while the process is already a zombie, or
   * still exiting (PF_EXITING: tearing down a large address space takes a while, longer
   * with a live branch's frozen fork sharing it).
   */
  async gone(): Promise<boolean> {
    if (!this.alive) return true;
    const stat = await readFile(`/proc/${this.pid}/stat`, 'utf8').catch(() => '');
    const [state = '', , , , , , flags = '0'] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return state === '' || state === 'Z' || state === 'X' || (Number(flags) & PF_EXITING) !== 0;
  }

  /**
   * The CPU time QEMU's threads ran and waited runnable so far (schedstat of each thread),
   * so the idle policy can tell a busy guest on a crowded host; undefined once it is gone.
   */
  async cpuTimes(): Promise<CpuTimes | undefined> {
    const tasks = await readdir(`/proc/${this.pid}/task`).catch(() => undefined);
    if (!tasks) return undefined;
    const times: CpuTimes = { ranS: 0, runnableS: {} };
    await Promise.all(
      tasks.map(async (t) => {
        const text = await readFile(`/proc/${this.pid}/task/${t}/schedstat`, 'utf8').catch(
          () => '',
        );
        const [run = 0, wait = 0] = text.split(' ').map(Number);
        times.ranS += run / 1e9;
        times.runnableS[t] = (run + wait) / 1e9;
      }),
    );
    return times;
  }

  /** Resolves when QEMU exits, however that happens. */
  waitExit(): Promise<VmExit> {
    return this.proc.exited;
  }

  /**
   * Start QEMU for a spec and connect to its monitor. QEMU's own stderr goes to qemu.log;
   * if it exits during start-up the error says why (its last log lines). QEMU gets its own
   * session, files for stdio and no reference from our event loop, so it outlives this
   * process (a daemon restart re-adopts it with {@link Vm.adopt}).
   */
  static async start(
    spec: VmSpec,
    opts: {
      incomingFd?: number;
      /** Runs right after the spawn, before QEMU is waited for (its cgroup); a failure ends it. */
      onSpawn?: (pid: number) => Promise<void>;
    } = {},
  ): Promise<Vm> {
    const files = vmFiles(spec.dir);
    const confinement = await confineVm(spec);
    const log = await open(files.log, 'a');
    let child: ChildProcess;
    let spawned: Promise<void>;
    try {
      // A restore's device state is handed over as QEMU's fd 3 (`migrate-incoming fd:3`):
      // Node cannot pass fds over the QMP socket (getfd), but it can at spawn.
      const stdio: (number | 'ignore')[] = ['ignore', log.fd, log.fd];
      if (opts.incomingFd !== undefined) stdio.push(opts.incomingFd);
      const [file, argv] = qemuArgv(spec, confinement);
      child = spawn(file, argv, {
        stdio,
        env: qemuEnv(),
        detached: true, // own session: a Ctrl-C on the CLI or the daemon's group never reaches QEMU
      });
      spawned = whenSpawned(child); // listen before any await: 'spawn' fires on the next tick
    } finally {
      await log.close();
    }
    await spawned;
    phase('vm: qemu spawned');
    child.unref();
    const proc = new ChildVmProcess(child);
    const died = proc.exited.then(async () => {
      throw new ForkdError('boot_failed', `QEMU exited during start-up: ${await tail(files.log)}`);
    });
    // Handled from the start: QEMU may exit while onSpawn is still placing it (it cannot
    // write its pid file on a full disk), and an unhandled rejection would end the daemon.
    died.catch(() => undefined);
    try {
      await opts.onSpawn?.(proc.pid);
      const qmp = await Promise.race([QmpClient.connect(files.qmp), died]);
      phase('vm: qmp connected');
      return new Vm(spec, proc, qmp);
    } catch (e) {
      // A QEMU that died on its own says why (its log: no room for its pid file); what
      // failed after (placing a gone pid in its cgroup: ESRCH) would only hide that.
      const own = await Promise.race([
        died.then(
          () => undefined,
          (d: unknown) => d,
        ),
        sleep(1000),
      ]);
      proc.forceKill();
      throw own ?? e;
    }
  }

  /**
   * Take over a QEMU started by an earlier process (a daemon that crashed or restarted):
   * check that `pid` really is the QEMU of `spec.dir` (never trust a recycled pid), then
   * reconnect to its monitor. Its liveness is then polled every `pollMs`.
   */
  static async adopt(
    spec: VmSpec,
    pid: number,
    opts: { pollMs?: number; timeoutMs?: number } = {},
  ): Promise<Vm> {
    if (!(await isQemuOf(pid, spec.dir))) {
      throw new ForkdError('internal', `pid ${pid} is not the QEMU of ${spec.dir}`, { pid });
    }
    // Whether it has a NIC, and its device set, are in its command line: a branch or a
    // hibernation of it must record the devices its device state holds, or nothing
    // restores from it.
    const argv = await argvOf(pid);
    if (!spec.net && argv.includes('-netdev')) spec = { ...spec, net: {} };
    spec = { ...spec, deviceSet: deviceSetOf(argv) };
    const proc = new AdoptedVmProcess(pid, spec.dir, opts.pollMs ?? 1000);
    const died = proc.exited.then(() => {
      throw new ForkdError('internal', `QEMU ${pid} exited while being adopted`, { pid });
    });
    try {
      const qmp = await Promise.race([
        QmpClient.connect(vmFiles(spec.dir).qmp, { timeoutMs: opts.timeoutMs ?? 5000 }),
        died,
      ]);
      // The monitor closing is the earliest sign of an exit: check then, not at the next poll.
      qmp.on('close', () => void proc.check());
      return new Vm(spec, proc, qmp);
    } catch (e) {
      proc.release();
      throw e;
    } finally {
      died.catch(() => undefined);
    }
  }

  /**
   * Load the device state handed over at start (fd 3) into a VM waiting in
   * `-incoming defer`; it comes up running (the state was saved as running).
   */
  async restore(timeoutMs = 30_000): Promise<void> {
    try {
      await this.restoring(timeoutMs);
    } catch (e) {
      // A QEMU killed mid-restore closes its monitor before its exit is noticed: a command
      // in flight then fails as "monitor closed" (internal). Say what happened instead.
      if (!isForkdError(e, 'internal') || !(await this.gone())) throw e;
      const consoleTail = await tail(this.files.console);
      throw new ForkdError(
        'boot_failed',
        `the VM stopped while restoring its state: ${consoleTail}`,
        {
          console: consoleTail,
        },
      );
    }
  }

  private async restoring(timeoutMs: number): Promise<void> {
    await this.qmp.execute('migrate-incoming', { uri: `fd:${INCOMING_FD}` });
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const st = await this.guard(
        this.qmp.execute<{ status?: string; 'error-desc'?: string }>('query-migrate'),
        'restoring its state',
      );
      if (st.status === 'completed') return phase('vm: state restored');
      if (st.status === 'failed' || Date.now() > deadline) {
        throw new ForkdError(
          'boot_failed',
          `restoring the VM failed: ${st['error-desc'] ?? (await tail(this.files.log))}`,
        );
      }
      await sleep(2);
    }
  }

  /** Reject with `boot_failed` (console tail included) if QEMU exits before `p` settles. */
  async guard<T>(p: Promise<T>, what: string): Promise<T> {
    const died = this.proc.exited.then(async () => {
      const consoleTail = await tail(this.files.console);
      throw new ForkdError('boot_failed', `the VM stopped while ${what}: ${consoleTail}`, {
        console: consoleTail,
      });
    });
    died.catch(() => undefined);
    return Promise.race([p, died]);
  }

  /** End QEMU: `quit` over QMP, then SIGKILL if it lingers. Idempotent. */
  async kill(graceMs = 1000): Promise<void> {
    if (this.alive) {
      await this.qmp.execute('quit', undefined, { timeoutMs: graceMs }).catch(() => undefined);
      phase('vm: quit answered');
      // A timer left pending would hold a short-lived process (`forkd run`) open a second.
      let timer: NodeJS.Timeout | undefined;
      const done = await Promise.race([
        this.proc.exited.then(() => true),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), graceMs))),
      ]);
      clearTimeout(timer);
      if (!done) {
        this.proc.forceKill();
        await this.proc.exited;
      }
    }
    this.proc.release();
    this.qmp.close();
  }

  /**
   * Let go of QEMU without ending it: close the monitor, stop watching. For a daemon that
   * shuts down and leaves its sandboxes running for the next one to adopt.
   */
  detach(): void {
    this.proc.release();
    this.qmp.close();
  }
}

/**
 * QEMU's argv, tuned as the daemon says (tuning.ts): through the launcher when it merges,
 * tunes or jails, inside the sandbox's network namespace when it has one (nsenter execs
 * it; the launcher then makes the jail inside that network namespace).
 */
function qemuArgv(spec: VmSpec, confinement: VmConfinement): [string, string[]] {
  const tuning = vmTuning();
  const args = [...buildQemuArgs({ tbMiB: tuning.tbMiB, ...spec }), ...confinement.qemu];
  const prefix = launcherPrefix(tuning, confinement.launcher);
  const [file, ...rest] = [...prefix, QEMU_BINARY, ...args] as [string, ...string[]];
  const ns = spec.net?.netns;
  return ns ? ['nsenter', [`--net=${ns}`, '--', file, ...rest]] : [file, rest];
}

/**
 * True when `pid` is alive and is a QEMU whose command line names `dir` (its sockets and
 * disk live there). A zombie has an empty cmdline, so it counts as gone.
 */
export async function isQemuOf(pid: number, dir: string): Promise<boolean> {
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  return cmdlineMatches(cmdline, dir);
}

async function argvOf(pid: number): Promise<string[]> {
  return (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
}

function isQemuOfSync(pid: number, dir: string): boolean {
  try {
    return cmdlineMatches(readFileSync(`/proc/${pid}/cmdline`, 'utf8'), dir);
  } catch {
    return false;
  }
}

function cmdlineMatches(cmdline: string, dir: string): boolean {
  const argv = cmdline.split('\0');
  const exe = basename(argv[0] ?? '');
  if (!exe.startsWith('qemu-system') && exe !== basename(QEMU_BINARY)) return false;
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  return argv.some((a) => a.includes(prefix));
}

/**
 * SIGKILL the QEMU of `dir` by pid, after checking the pid still is that QEMU, and wait
 * (up to `waitMs`) until it is gone. Returns false when there was no such QEMU.
 */
export async function killVerifiedQemu(pid: number, dir: string, waitMs = 5000): Promise<boolean> {
  if (!(await isQemuOf(pid, dir))) return false;
  signalGroup(pid, 'SIGKILL');
  const deadline = Date.now() + waitMs;
  while ((await isQemuOf(pid, dir)) && Date.now() < deadline) await sleep(20);
  return true;
}

/** The pid QEMU wrote to its pidfile, if any. */
export async function readQemuPid(dir: string): Promise<number | undefined> {
  const text = await readFile(vmFiles(dir).pid, 'utf8').catch(() => '');
  const pid = Number(text.trim());
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
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

/** QEMU leads its own process group (spawned detached); fall back to the pid alone. */
function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // already gone
    }
  }
}

/** The last lines of a log file, for error messages. */
export async function tail(path: string, lines = 15): Promise<string> {
  const text = await readFile(path, 'utf8').catch(() => '');
  return text.replace(/\r/g, '').trim().split('\n').slice(-lines).join('\n') || '(empty log)';
}
