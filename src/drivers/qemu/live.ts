/**
 * The live copier (native/live.c) as seen from the host: a `forkd-capture live` process that
 * makes a stopped QEMU fork (a copy-on-write view of its RAM), answers as soon as the VM may
 * resume, and copies the written pages from that frozen view while the VM runs again.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { ForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { CAPTURE_BINARY, mappingArgs, ramRegion, regionArgs, type RamRegion } from './helper.js';
import type { Vm } from './vm.js';
import type { LiveProbe } from '../vmm.js';

/** What the copier reports when its copy is complete. */
export interface LiveCopy {
  pages: number;
  bytes: number;
  fork_ms: number;
  copy_ms: number;
  reap_ms: number;
}

type Event = { event: string } & Record<string, number | boolean | string>;

/** One live copy: start() while the VM runs, fork() while it is stopped, done() after. */
export class LiveCopier {
  private readonly events: Event[] = [];
  private readonly waiters: (() => void)[] = [];
  private stderr = '';
  private exit: { code: number | null; signal: string | null } | undefined;

  private constructor(
    private readonly proc: ChildProcessWithoutNullStreams,
    readonly region: RamRegion,
  ) {
    createInterface({ input: proc.stdout }).on('line', (line) => {
      try {
        this.events.push(JSON.parse(line) as Event);
      } catch {
        this.stderr += `${line}\n`;
      }
      this.wake();
    });
    proc.stderr.on(
      'data',
      (b: Buffer) => (this.stderr = (this.stderr + b.toString()).slice(-4000)),
    );
    proc.on('close', (code, signal) => {
      this.exit = { code, signal };
      this.wake();
    });
    proc.on('error', (err) => {
      this.stderr += err.message;
      this.exit = { code: null, signal: null };
      this.wake();
    });
    proc.stdin.on('error', () => undefined);
  }

  /** Spawn the copier and wait until it is ready (stub page in place; the VM still runs). */
  static async start(region: RamRegion, memoryFile: string): Promise<LiveCopier> {
    const proc = spawn(CAPTURE_BINARY, ['live', ...regionArgs(region), memoryFile], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const copier = new LiveCopier(proc, region);
    await copier.next('ready');
    return copier;
  }

  /** The copier's pid (tests kill it mid-copy). */
  get pid(): number {
    return this.proc.pid as number;
  }

  /** Make the stopped VM's QEMU fork; resolves once the VM may resume. */
  async fork(): Promise<{ child: number; fork_ms: number }> {
    this.proc.stdin.write('fork\n');
    const ev = await this.next('forked');
    return { child: Number(ev.child), fork_ms: Number(ev.fork_ms) };
  }

  /** Start the copy (the VM runs again), wait for it and for the frozen fork to be gone. */
  async done(): Promise<LiveCopy> {
    this.proc.stdin.write('copy\n');
    const ev = await this.next('done');
    await this.exited();
    return ev as unknown as LiveCopy;
  }

  /** Give up: before fork() it leaves QEMU untouched; after, the frozen fork is killed. */
  async abort(): Promise<void> {
    this.proc.stdin.end();
    if (!this.exit) this.proc.kill('SIGKILL');
    await this.exited();
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  private async next(name: string): Promise<Event> {
    for (;;) {
      const ev = this.events.find((e) => e.event === name);
      if (ev) return ev;
      if (this.exit) throw this.failure(`before "${name}"`);
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  private async exited(): Promise<void> {
    while (!this.exit) await new Promise<void>((r) => this.waiters.push(r));
    if (this.exit.code !== 0) throw this.failure('');
  }

  private failure(when: string): ForkdError {
    const how = this.exit?.signal ? `killed by ${this.exit.signal}` : `exit ${this.exit?.code}`;
    const why = this.stderr.trim().split('\n').at(-1) ?? '';
    return new ForkdError(
      'internal',
      `live copy failed ${when} (${how}): ${why}`.replace('  ', ' '),
    );
  }
}

/**
 * Make QEMU reap frozen forks a killed copier left behind (zombies until their parent
 * waits) and mark guest RAM MADV_DONTFORK again. Safe to run on any forkd VM.
 */
export async function cleanupLive(region: RamRegion): Promise<{ zombies: number; reaped: number }> {
  const { stdout } = await run(CAPTURE_BINARY, ['live-cleanup', ...mappingArgs(region)]);
  return JSON.parse(stdout) as { zombies: number; reaped: number };
}

/** {@link cleanupLive} on a VM's guest RAM. */
export async function reapLiveForks(vm: Vm): Promise<{ zombies: number; reaped: number }> {
  return cleanupLive(await ramRegion(vm.pid, vm.spec.memPath, vm.spec.memoryMiB * 1024 * 1024));
}

export type { LiveProbe } from '../vmm.js';

/** Whether live capture works on this host: the whole sequence run on a test process. */
export async function probeLive(): Promise<LiveProbe> {
  if (process.arch !== 'x64') {
    return { available: false, reason: `x86_64 only (this host is ${process.arch})`, fork_ms: 0 };
  }
  try {
    const { stdout } = await run(CAPTURE_BINARY, ['live-probe'], { timeoutMs: 10_000 });
    return JSON.parse(stdout) as LiveProbe;
  } catch (e) {
    return { available: false, reason: e instanceof Error ? e.message : String(e), fork_ms: 0 };
  }
}
