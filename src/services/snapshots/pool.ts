/**
 * The VMM pool: per snapshot, QEMU processes started ahead of time and waiting in
 * `-incoming defer` (its memory file is bound when QEMU starts, so a pool is per
 * snapshot), so a fork pays neither QEMU's start nor qemu-img. Refilled in the background,
 * one at a time, so a refill never competes with a burst of forks for the CPU. All pools
 * together stay within the host-wide budget (pool-budget.ts): a member is asked for before
 * its QEMU starts and again once its memory is measured.
 */
import type { PreparedChild } from './fork.js';
import { PoolBudget, type BudgetMember } from './pool-budget.js';

/** How long after a fork the pool starts replacing what it handed out. */
const REFILL_DELAY_MS = 300;

export interface PoolLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export class Pool {
  private readonly ready = new Map<string, PreparedChild[]>();
  private readonly targets = new Map<string, number>();
  private readonly filling = new Map<string, Promise<void>>();
  private readonly pendingRefill = new Map<string, NodeJS.Timeout>();
  private closed = false;

  private readonly prewarmed = new Set<string>();
  /** Host memory of each waiting member (by id), as measured when it became ready. */
  private readonly bytes = new Map<string, number | undefined>();
  /** Members whose QEMU is starting, by tag, with the memory they are expected to take. */
  private readonly starting = new Map<string, number | undefined>();
  /** Tags whose last fill stopped at the budget. */
  private readonly held = new Set<string>();

  constructor(
    private readonly prepare: (tag: string, prewarm: boolean) => Promise<PreparedChild>,
    private readonly discard: (child: PreparedChild) => Promise<void>,
    private readonly log: PoolLog,
    readonly budget = new PoolBudget({ vms: Infinity, memoryBytes: Infinity }),
    private readonly measure: (child: PreparedChild) => Promise<number | undefined> = async () =>
      undefined,
  ) {}

  /**
   * Size asked for, members ready now, whether they are pre-warmed, and how many of the
   * size the host's pool budget holds back.
   */
  state(tag: string): { size: number; ready: number; prewarm: boolean; held: number } {
    const size = this.targets.get(tag) ?? 0;
    const ready = this.ready.get(tag)?.length ?? 0;
    return {
      size,
      ready,
      prewarm: this.prewarmed.has(tag),
      held: this.held.has(tag) ? Math.max(0, size - ready) : 0,
    };
  }

  /** The budget and what every pool's members take of it (waiting and starting ones). */
  usage(): { vms: number; memoryBytes: number; limits: PoolBudget['limits'] } {
    const members = this.budgetMembers();
    const memoryBytes = members.reduce((sum, m) => sum + (m.bytes ?? 0), 0);
    return { vms: members.length, memoryBytes, limits: this.budget.limits };
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
    this.budget.touch(tag); // a pool just asked for is not the first to give way
    await Promise.all(extra.map((c) => this.end(c)));
    this.refill(tag);
    if (extra.length > 0) this.refillHeld();
  }

  /**
   * A ready member whose QEMU still runs, or undefined. The refill starts a moment later,
   * so starting new QEMUs does not compete for the CPU with the restores of a burst.
   */
  take(tag: string): PreparedChild | undefined {
    const list = this.ready.get(tag) ?? [];
    let child: PreparedChild | undefined;
    while ((child = list.shift()) && !child.vm.alive) void this.end(child);
    if (child) this.bytes.delete(child.id);
    this.budget.touch(tag); // also with none ready: its refill may now take others' room
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
    this.held.delete(tag);
    this.budget.forget(tag);
    await Promise.all(list.map((c) => this.end(c)));
    if (list.length > 0) this.refillHeld();
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
    this.held.delete(tag);
    while (!this.closed && (this.ready.get(tag)?.length ?? 0) < (this.targets.get(tag) ?? 0)) {
      // Expected to take what its siblings took (0 before the first is measured).
      const expected = this.ready
        .get(tag)
        ?.map((c) => this.bytes.get(c.id))
        .find(Boolean);
      if (!this.admit(tag, expected)) return;
      this.starting.set(tag, expected);
      let child: PreparedChild;
      try {
        child = await this.prepare(tag, this.prewarmed.has(tag));
      } catch (e) {
        this.starting.delete(tag);
        this.log.warn({ snapshot: tag, err: e }, 'could not start a pool VM');
        if (++failures >= 3) return; // the next take() tries again
        continue;
      }
      const bytes = await this.measure(child).catch(() => undefined);
      this.starting.delete(tag);
      if (this.closed || !this.targets.has(tag) || !this.admit(tag, bytes)) {
        await this.discard(child);
        return;
      }
      this.bytes.set(child.id, bytes);
      const list = this.ready.get(tag) ?? [];
      list.push(child);
      this.ready.set(tag, list);
    }
  }

  /**
   * Whether one more member of `tag` taking `bytes` fits the budget; members of less
   * recently forked snapshots are ended to make room when that is enough. When it does not
   * fit, the pool is held back (shown in its state) until a fork of it or freed room.
   */
  private admit(tag: string, bytes: number | undefined): boolean {
    const plan = this.budget.plan(tag, bytes, this.budgetMembers());
    if (!plan.fits) {
      this.held.add(tag);
      return false;
    }
    for (const id of plan.evict) {
      for (const [other, list] of this.ready) {
        const at = list.findIndex((c) => c.id === id);
        if (at < 0) continue;
        const [gone] = list.splice(at, 1);
        this.held.add(other);
        this.log.info({ snapshot: other, for: tag }, 'pool VM ended: the pool budget is full');
        void this.end(gone as PreparedChild);
      }
    }
    return true;
  }

  /** Every member the budget counts: the waiting ones and the ones starting. */
  private budgetMembers(): BudgetMember[] {
    const members: BudgetMember[] = [];
    for (const [tag, list] of this.ready) {
      for (const c of list) members.push({ tag, id: c.id, bytes: this.bytes.get(c.id) });
    }
    for (const [tag, bytes] of this.starting) {
      members.push({ tag, id: `starting:${tag}`, bytes, starting: true });
    }
    return members;
  }

  /** Room was freed: held-back pools try again (each refill asks the budget anew). */
  private refillHeld(): void {
    for (const tag of [...this.held]) this.refill(tag);
  }

  /** End a member that leaves the pool unused. */
  private async end(child: PreparedChild): Promise<void> {
    this.bytes.delete(child.id);
    await this.discard(child);
  }
}
