/**
 * The host-wide pool budget (docs/snapshots.md, "The pool budget"): every snapshot's
 * pre-started VMs together stay within a count and a memory figure. A pool VM that would
 * not fit is only started when the pools of snapshots forked less recently than its own
 * give up members for it, least recently forked first; otherwise its pool stays short
 * ("held back") until a fork of its snapshot makes it the most recent. A held-back pool
 * costs nothing: its next fork takes the cold path. This module decides; the pool acts.
 */

/** The budget: pool VMs at most, and their host memory at most (bytes). */
export interface PoolBudgetLimits {
  vms: number;
  memoryBytes: number;
}

/** The defaults (docs/snapshots.md): three snapshots' default pools, most of them. */
export const DEFAULT_POOL_BUDGET: PoolBudgetLimits = { vms: 8, memoryBytes: 384 * 1024 * 1024 };

/** Upper bounds of the daemon's flags (a budget past them is no budget). */
export const POOL_BUDGET_MAX = { vms: 1000, mib: 1024 * 1024 };

/** A pool VM the budget counts: waiting, or starting (then it cannot be given up). */
export interface BudgetMember {
  tag: string;
  id: string;
  /** Its host memory, measured; undefined where the host does not measure it (no cgroup). */
  bytes: number | undefined;
  /** Still starting: it counts, but cannot be ended to make room. */
  starting?: boolean;
}

/** What the budget allows a new member: whether it fits, and who goes to make room. */
export interface BudgetPlan {
  fits: boolean;
  /** Ids of waiting members to end first (empty when it does not fit). */
  evict: string[];
}

/**
 * The budget from FORKD_POOL_BUDGET_VMS and FORKD_POOL_BUDGET_MIB (`forkd daemon
 * --pool-budget-vms/--pool-budget-mib`), each defaulting when unset or not a number in range.
 */
export function poolBudgetFromEnv(env: NodeJS.ProcessEnv = process.env): PoolBudgetLimits {
  const read = (name: string, max: number): number | undefined => {
    const n = Number(env[name]);
    return env[name] !== undefined && Number.isInteger(n) && n >= 0 && n <= max ? n : undefined;
  };
  const mib = read('FORKD_POOL_BUDGET_MIB', POOL_BUDGET_MAX.mib);
  return {
    vms: read('FORKD_POOL_BUDGET_VMS', POOL_BUDGET_MAX.vms) ?? DEFAULT_POOL_BUDGET.vms,
    memoryBytes: mib === undefined ? DEFAULT_POOL_BUDGET.memoryBytes : mib * 1024 * 1024,
  };
}

export class PoolBudget {
  /** tag → when its snapshot was last forked (or its pool set): a counter, not a clock. */
  private readonly used = new Map<string, number>();
  private clock = 0;

  constructor(readonly limits: PoolBudgetLimits) {}

  /** A fork of `tag` (or a pool set for it): its pool is now the most recently used. */
  touch(tag: string): void {
    this.used.set(tag, ++this.clock);
  }

  /** Forget a snapshot whose pool is gone. */
  forget(tag: string): void {
    this.used.delete(tag);
  }

  /**
   * Whether one more member of `tag`, taking `bytes`, fits beside `members` (every pool VM
   * waiting or starting, not counting the new one); when it fits only by making room, which
   * waiting members of snapshots forked less recently than `tag` go, least recent first
   * (and within one snapshot its newest first, so the oldest ones, the most settled, stay).
   */
  plan(tag: string, bytes: number | undefined, members: readonly BudgetMember[]): BudgetPlan {
    let vms = members.length + 1;
    let memory = (bytes ?? 0) + members.reduce((sum, m) => sum + (m.bytes ?? 0), 0);
    const over = () => vms > this.limits.vms || memory > this.limits.memoryBytes;
    if (!over()) return { fits: true, evict: [] };
    const mine = this.used.get(tag) ?? this.clock + 1;
    const older = members
      .map((m, at) => ({ m, at, used: this.used.get(m.tag) ?? 0 }))
      .filter(({ m, used }) => !m.starting && m.tag !== tag && used < mine)
      .sort((a, b) => a.used - b.used || b.at - a.at);
    const evict: string[] = [];
    for (const { m } of older) {
      if (!over()) break;
      evict.push(m.id);
      vms -= 1;
      memory -= m.bytes ?? 0;
    }
    return over() ? { fits: false, evict: [] } : { fits: true, evict };
  }
}
