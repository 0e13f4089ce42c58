/**
 * What the shim learns from the daemon on its own, not from containerd: that a task's VM
 * ended without a Kill (the host's OOM killer at its memory limit, a crash), and what its
 * cgroup uses (Stats). The watch asks the daemon every few seconds, one list call for all
 * the sandboxes of the shim's namespace, and reports each watched sandbox that no longer
 * runs once.
 */
import { Sandbox, type SandboxInfo, type SandboxUsage } from '@forkd/sdk';
import { setTimeout as sleep } from 'node:timers/promises';
import { encode } from './proto.js';

/** How long `check` waits for the daemon to see a VM's end: 20 × 250 ms. */
const CHECK_TRIES = 20;
const CHECK_MS = 250;

/** A watched task: its pod's VM, none until it is made (pod.ts). */
interface Watched {
  pod: { vm: Pick<Sandbox, 'id' | 'refresh'> | undefined };
}

/** Watches the sandboxes of tasks `T` labelled `label` (`key=value`); a task without a VM yet is skipped. */
export class Watch<T extends Watched> {
  private readonly watched = new Set<T>();
  private timer: NodeJS.Timeout | undefined;
  private busy = false;

  constructor(
    private readonly label: string,
    private readonly everyMs: number,
    /** The VM of `task` ended; `info` is its last word (undefined: the daemon forgot it). */
    private readonly onEnd: (task: T, info: SandboxInfo | undefined) => Promise<void>,
  ) {}

  add(task: T): void {
    this.watched.add(task);
    this.timer ??= setInterval(() => void this.tick(), this.everyMs);
  }

  /** Stop watching `task` (its sandbox is about to be killed on purpose). */
  remove(task: T): void {
    this.watched.delete(task);
    if (this.watched.size === 0) this.stop();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /**
   * A process of `task`'s sandbox lost its stream: if the VM is ending, report it now (before
   * the process's exit, so `/tasks/oom` comes first), waiting a moment for the daemon to see
   * QEMU gone.
   */
  async check(task: T): Promise<void> {
    const vm = task.pod.vm;
    for (let i = 0; vm && i < CHECK_TRIES && this.watched.has(task); i++) {
      const info = await vm.refresh().catch(() => undefined);
      if (info?.state !== 'running' && info?.state !== 'starting') return this.ended(task, info);
      await sleep(CHECK_MS);
    }
  }

  private async tick(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      // Only VMs made before the list was asked for can be missing from it.
      const asked = [...this.watched].flatMap((t) => (t.pod.vm ? [[t, t.pod.vm.id] as const] : []));
      const list = await Sandbox.list({ label: this.label });
      const byId = new Map(list.map((info) => [info.id, info]));
      for (const [task, id] of asked) {
        const info = byId.get(id);
        if (info?.state !== 'running' && info?.state !== 'starting') await this.ended(task, info);
      }
    } catch {
      // the daemon is away (restarting): ask again next time
    } finally {
      this.busy = false;
    }
  }

  /** Report `task`'s end once, whoever saw it first. */
  private async ended(task: T, info: SandboxInfo | undefined): Promise<void> {
    if (this.watched.delete(task)) await this.onEnd(task, info);
  }
}

/**
 * cgroup v1's `io.containerd.cgroups.v1.Metrics` (an Any) of a sandbox's usage: memory
 * charged now (and its limit), CPU time in ns, OOM kills. What containerd's runc shim
 * reports from a container's cgroup; `ctr task metrics` and CRI's ContainerStats read it.
 */
export function cgroupMetrics(
  u: SandboxUsage,
  limitBytes: number | undefined,
): { type_url: string; value: Uint8Array } {
  const memory = { usage: { usage: u.memoryBytes, limit: limitBytes ?? 0 } };
  const cpu = { usage: { total: Math.round(u.cpuSeconds * 1e9) } };
  const metrics = { memory, cpu, memory_oom_control: { oom_kill: u.oomKills } };
  return {
    type_url: 'io.containerd.cgroups.v1.Metrics',
    value: encode('cgroups.Metrics', metrics),
  };
}
