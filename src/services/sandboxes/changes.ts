/**
 * What a running sandbox may change while it runs (PATCH): its timeout, its limits (the
 * cgroup first, so a limit the kernel refuses leaves the row as it was) and its idle policy
 * (stored, so a restarted daemon keeps it, and applied at once).
 */
import type { LimitsRequestT, PatchSandboxT, SandboxT } from '../../contract/schemas.js';
import { LIMITS } from '../../contract/rules.js';
import type { SandboxRow, StoredIdle } from '../../store/sandboxes.js';
import { checkRange } from '../checks.js';
import type { IdleTiers } from './idle.js';
import { expiry } from './live.js';
import type { SandboxParts } from './parts.js';
import { changeIdle, type IdleAfter, type IdleRequest } from './tiers.js';
import type { SandboxViews } from './wire.js';

export class SandboxChanges {
  constructor(
    private readonly p: SandboxParts,
    private readonly views: SandboxViews,
    private readonly tiers: IdleTiers,
    private readonly idleDefaults: IdleAfter,
    /** The sandbox as `get` shows it, for a PATCH that changes nothing. */
    private readonly get: (id: string) => Promise<SandboxT>,
  ) {}

  /** A new timeout from now; while a pause holds its timeout, what its wake gives back. */
  async extend(id: string, timeoutS: number): Promise<SandboxT> {
    checkRange('timeout_s', timeoutS, LIMITS.timeoutS);
    const row = this.p.table.active(id);
    if (row.timeout_held_s !== null && row.timeout_held_s !== undefined) {
      return this.views.wire(
        this.p.table.rows.update(id, { timeout_held_s: timeoutS }) as SandboxRow,
      );
    }
    const updated = this.p.table.rows.update(id, { expires_at: expiry(timeoutS) }) as SandboxRow;
    if (this.p.table.get(id)) this.p.table.timers.arm(id, updated.expires_at);
    return this.views.wire(updated);
  }

  /**
   * New limits for a running sandbox: each given field replaces its value, the others stay;
   * checked like a create's (guest RAM, host cores). The cgroup changes first, so a limit
   * the kernel refuses (memory below what it uses now) leaves the row as it was.
   */
  async setLimits(id: string, req: LimitsRequestT): Promise<SandboxT> {
    const live = this.p.table.running(id);
    const row = this.p.table.row(id);
    const ctx = { memoryMiB: row.memory_mib, cpus: row.cpus, inherited: row.limits ?? undefined };
    const limits = await this.p.limiter.resolve(req, ctx);
    // A hibernated one has no cgroup: its wake makes it with the limits in its row.
    if (live.vm && row.limits) await this.p.limiter.apply(id, limits);
    else if (live.vm) await this.p.limiter.place(id, limits, live.vm.pid);
    this.p.log.info({ sandbox: id, limits }, 'sandbox limits changed');
    return this.views.wire(this.p.table.rows.update(id, { limits }) as SandboxRow);
  }

  /**
   * PATCH: change a running sandbox's limits, idle policy and timeout together. The idle
   * policy and the timeout are checked before anything changes, so a refused request
   * (bad values, limits the kernel will not take) leaves the sandbox as it was.
   */
  async update(id: string, patch: PatchSandboxT): Promise<SandboxT> {
    const { timeout_s: timeoutS, limits, idle } = patch;
    if (timeoutS !== undefined) checkRange('timeout_s', timeoutS, LIMITS.timeoutS);
    const policy = idle === undefined ? undefined : this.nextIdle(this.p.table.active(id), idle);
    let changed = limits ? await this.setLimits(id, limits) : undefined;
    if (policy !== undefined) changed = this.applyIdle(id, policy);
    if (timeoutS !== undefined) changed = await this.extend(id, timeoutS);
    return changed ?? this.get(id);
  }

  /**
   * A starting or running sandbox's new idle policy: its times left out keep their value now; null
   * (none of its own) makes it follow the daemon's defaults again.
   */
  private nextIdle(row: SandboxRow, req: IdleRequest | null): StoredIdle | null {
    return req === null ? null : changeIdle(row.idle, req, this.idleDefaults);
  }

  /** Store it (a restarted daemon keeps it) and apply it at once. */
  private applyIdle(id: string, idle: StoredIdle | null): SandboxT {
    const updated = this.p.table.rows.update(id, { idle }) as SandboxRow;
    this.tiers.touched(id);
    this.p.log.info({ sandbox: id, idle }, 'sandbox idle policy changed');
    return this.views.wire(updated);
  }
}
