/**
 * The VMM pool: per snapshot, QEMU processes started ahead of time and waiting in
 * `-incoming defer` (its memory file is bound when QEMU starts, so a pool is per
 * snapshot), so a fork pays neither QEMU's start nor qemu-img. Refilled in the background,
 * one at a time, so a refill never competes with a burst of forks for the CPU.
 */
import type { PreparedChild } from './fork.js';

/** How long after a fork the pool starts replacing what it handed out. */
const REFILL_DELAY_MS = 300;

export interface PoolLog {
  warn(obj: object, msg: string): void;
}

export class Pool {
  private readonly ready = new Map<string, PreparedChild[]>();
  private readonly targets = new Map<string, number>();
  private readonly filling = new Map<string, Promise<void>>();
  private readonly pendingRefill = new Map<string, NodeJS.Timeout>();
  private closed = false;

  private readonly prewarmed = new Set<string>();

  constructor(
    private readonly prepare: (tag: string, prewarm: boolean) => Promise<PreparedChild>,
    private readonly discard: (child: PreparedChild) => Promise<void>,
    private readonly log: PoolLog,
  ) {}

  /** Size asked for, members ready now, and whether they are pre-warmed. */
  state(tag: string): { size: number; ready: number; prewarm: boolean } {
    return {
      size: this.targets.get(tag) ?? 0,
      ready: this.ready.get(tag)?.length ?? 0,
      prewarm: this.prewarmed.has(tag),
    };
  }

  /** The members waiting now (to measure them; taking one is `take`). */
  members(tag: string): readonly PreparedChild[] {
    return [...(this.ready.get(tag) ?? [])];
  }

  /** The tags that have a pool (of any size). */
  tags(): string[] {
    return [...this.targets.keys()];
  }

  /** Total members ready, for /metrics. */
  total(): number {
    let n = 0;
    for (const list of this.ready.values()) n += list.length;
    return n;
  }

  /** Keep `size` members ready for `tag` (0 empties it); a change of kind replaces them all. */
  async setSize(tag: string, size: number, prewarm = false): Promise<void> {
    if (prewarm !== this.prewarmed.has(tag)) {
      await this.drop(tag);
      if (prewarm) this.prewarmed.add(tag);
    }
    this.targets.set(tag, size);
    const list = this.ready.get(tag) ?? [];
    const extra = list.splice(size);
    this.ready.set(tag, list);
    await Promise.all(extra.map((c) => this.discard(c)));
    this.refill(tag);
  }

  /**
   * A ready member whose QEMU still runs, or undefined. The refill starts a moment later,
   * so starting new QEMUs does not compete for the CPU with the restores of a burst.
   */
  take(tag: string): PreparedChild | undefined {
    const list = this.ready.get(tag) ?? [];
    let child: PreparedChild | undefined;
    while ((child = list.shift()) && !child.vm.alive) void this.discard(child);
    clearTimeout(this.pendingRefill.get(tag));
    const timer = setTimeout(() => {
      this.pendingRefill.delete(tag);
      this.refill(tag);
    }, REFILL_DELAY_MS);
    timer.unref();
    this.pendingRefill.set(tag, timer);
    return child;
  }

  /** Wait until `tag`'s pool is refilled (tests, benchmarks). */
  async settled(tag: string): Promise<void> {
    if (this.pendingRefill.has(tag)) {
      clearTimeout(this.pendingRefill.get(tag));
      this.pendingRefill.delete(tag);
      this.refill(tag);
    }
    while (this.filling.has(tag)) await this.filling.get(tag);
  }

  /** Empty and forget one snapshot's pool. */
  async drop(tag: string): Promise<void> {
    this.targets.delete(tag);
    this.prewarmed.delete(tag);
    clearTimeout(this.pendingRefill.get(tag));
    this.pendingRefill.delete(tag);
    await this.filling.get(tag);
    const list = this.ready.get(tag) ?? [];
    this.ready.delete(tag);
    await Promise.all(list.map((c) => this.discard(c)));
  }

  /** End every member (daemon shutdown: pool VMs are not sandboxes and are not kept). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.targets.keys()].map((tag) => this.drop(tag)));
  }

  private refill(tag: string): void {
    if (this.filling.has(tag) || this.closed) return;
    const run = this.fill(tag).finally(() => this.filling.delete(tag));
    this.filling.set(tag, run);
  }

  private async fill(tag: string): Promise<void> {
    let failures = 0;
    while (!this.closed && (this.ready.get(tag)?.length ?? 0) < (this.targets.get(tag) ?? 0)) {
      try {
        const child = await this.prepare(tag, this.prewarmed.has(tag));
        if (this.closed || !this.targets.has(tag)) {
          await this.discard(child);
          return;
        }
        const list = this.ready.get(tag) ?? [];
        list.push(child);
        this.ready.set(tag, list);
      } catch (e) {
        this.log.warn({ snapshot: tag, err: e }, 'could not start a pool VM');
        if (++failures >= 3) return; // the next take() tries again
      }
    }
  }
}
