/**
 * Sandbox rows: what the daemon knows of every sandbox, running or ended. A row is written
 * before a boot starts, so a daemon that crashes mid-boot finds the sandbox on restart.
 */
import type Database from 'better-sqlite3';
import { RowChanges } from './changes.js';

export type SandboxState = 'starting' | 'running' | 'stopped' | 'dead';

/** One sandbox as stored; labels and env decoded. Times are ISO 8601 strings. */
export interface SandboxRow {
  id: string;
  state: SandboxState;
  image: string | null;
  snapshot: string | null;
  parent: string | null;
  memory_mib: number;
  cpus: number;
  labels: Record<string, string>;
  env: Record<string, string>;
  created_at: string;
  expires_at: string | null;
  pid: number | null;
  dir: string;
  reason: string | null;
  updated_at: string;
  /**
   * The snapshot whose disk its top layer is built on: the one it was forked from, then
   * after each branch the new one. Removing that snapshot would break this sandbox.
   */
  disk_base: string | null;
  /** Set when its disk chain could not be repaired after an interrupted branch: why. */
  disk_problem: string | null;
  /** Its resource limits and the cgroup version enforcing them (null: a row from before limits). */
  limits?: StoredLimits | null;
  /** How awake it is while `running` (docs/idle.md); `running` for every other state. */
  tier: SandboxTier;
  /** Its idle policy (null: the daemon's defaults). */
  idle?: StoredIdle | null;
  /**
   * Seconds of its timeout a pause held (`expires_at` is null meanwhile), given back by its
   * wake; null when none is held (docs/idle.md "The timeout of a paused sandbox").
   */
  timeout_held_s?: number | null;
}

/** How awake a running sandbox is: QEMU running, stopped, or ended with the VM on disk. */
export type SandboxTier = 'running' | 'paused' | 'hibernated' | 'halted';

/** When an idle sandbox is paused, in seconds since its last request (null: never). */
export interface StoredIdle {
  pause_after_s: number | null;
  hibernate_after_s: number | null;
}

/** A sandbox's limits as stored (null fields: no limit of that kind). */
export interface StoredLimits {
  memory_bytes: number | null;
  cpu: number | null;
  pids: number | null;
  cgroup: 'v1' | 'v2' | null;
}

type Encoded = Omit<SandboxRow, 'labels' | 'env' | 'limits' | 'idle'> & {
  labels: string;
  env: string;
  limits: string | null;
  idle: string | null;
};

/** The states of a sandbox whose QEMU should be running. */
export const ACTIVE_STATES: readonly SandboxState[] = ['starting', 'running'];

function decode(r: Encoded): SandboxRow {
  return {
    ...r,
    labels: JSON.parse(r.labels) as Record<string, string>,
    env: JSON.parse(r.env) as Record<string, string>,
    limits: r.limits === null ? null : (JSON.parse(r.limits) as StoredLimits),
    idle: r.idle === null ? null : (JSON.parse(r.idle) as StoredIdle),
  };
}

const now = () => new Date().toISOString();

/** Prepared statements over the `sandboxes` table. */
export class SandboxRows {
  private readonly byId: Database.Statement<[string], Encoded>;
  private readonly all: Database.Statement<[], Encoded>;
  private readonly byState: Database.Statement<[string], Encoded>;

  constructor(
    private readonly db: Database.Database,
    private readonly changes = new RowChanges(),
  ) {
    this.byId = db.prepare('SELECT * FROM sandboxes WHERE id = ?');
    this.all = db.prepare('SELECT * FROM sandboxes ORDER BY created_at, id');
    this.byState = db.prepare('SELECT * FROM sandboxes WHERE state = ? ORDER BY created_at, id');
  }

  insert(row: Omit<SandboxRow, 'updated_at' | 'disk_base' | 'disk_problem' | 'tier'>): SandboxRow {
    const full = {
      ...row,
      limits: row.limits ?? null,
      idle: row.idle ?? null,
      tier: 'running' as const,
      disk_base: row.snapshot,
      disk_problem: null,
      updated_at: now(),
    };
    this.db
      .prepare(
        `INSERT INTO sandboxes (id, state, image, snapshot, parent, memory_mib, cpus, labels,
           env, created_at, expires_at, pid, dir, reason, updated_at, disk_base, limits, idle,
           tier)
         VALUES (@id, @state, @image, @snapshot, @parent, @memory_mib, @cpus, @labels, @env,
           @created_at, @expires_at, @pid, @dir, @reason, @updated_at, @disk_base, @limits,
           @idle, @tier)`,
      )
      .run({
        ...full,
        labels: JSON.stringify(row.labels),
        env: JSON.stringify(row.env),
        limits: full.limits === null ? null : JSON.stringify(full.limits),
        idle: full.idle === null ? null : JSON.stringify(full.idle),
      });
    this.changes.emit({ table: 'sandboxes', key: row.id, op: 'insert', state: row.state });
    return full;
  }

  get(id: string): SandboxRow | undefined {
    const r = this.byId.get(id);
    return r && decode(r);
  }

  /** Every row, oldest first, optionally of one state. */
  list(state?: SandboxState): SandboxRow[] {
    return (state ? this.byState.all(state) : this.all.all()).map(decode);
  }

  /** Rows whose QEMU should be running (`starting` or `running`). */
  active(): SandboxRow[] {
    return ACTIVE_STATES.flatMap((s) => this.list(s));
  }

  /** Set some fields of a row (and updated_at); returns the new row. */
  update(
    id: string,
    fields: Partial<
      Pick<
        SandboxRow,
        | 'state'
        | 'pid'
        | 'expires_at'
        | 'reason'
        | 'disk_base'
        | 'disk_problem'
        | 'tier'
        | 'limits'
        | 'idle'
        | 'timeout_held_s'
      >
    >,
  ): SandboxRow | undefined {
    const keys = Object.keys(fields) as (keyof typeof fields)[];
    const sets = [...keys.map((k) => `${k} = @${k}`), 'updated_at = @updated_at'].join(', ');
    const limits = 'limits' in fields ? { limits: JSON.stringify(fields.limits ?? null) } : {};
    const idle = 'idle' in fields ? { idle: fields.idle ? JSON.stringify(fields.idle) : null } : {};
    this.db
      .prepare(`UPDATE sandboxes SET ${sets} WHERE id = @id`)
      .run({ ...fields, ...limits, ...idle, id, updated_at: now() });
    const updated = this.get(id);
    if (updated) {
      this.changes.emit({ table: 'sandboxes', key: id, op: 'update', state: updated.state });
    }
    return updated;
  }

  delete(id: string): void {
    this.db.prepare('DELETE FROM sandboxes WHERE id = ?').run(id);
    this.changes.emit({ table: 'sandboxes', key: id, op: 'delete' });
  }

  /** Forget stopped and dead sandboxes that ended before `before` (ISO time). */
  pruneEnded(before: string): number {
    const n = this.db
      .prepare(`DELETE FROM sandboxes WHERE state IN ('stopped', 'dead') AND updated_at < ?`)
      .run(before).changes;
    if (n) this.changes.emit({ table: 'sandboxes', key: '*', op: 'delete' });
    return n;
  }

  /** Number of sandboxes per state, every state present (0 when none). */
  countByState(): Record<SandboxState, number> {
    const counts: Record<SandboxState, number> = { starting: 0, running: 0, stopped: 0, dead: 0 };
    const rows = this.db
      .prepare('SELECT state, COUNT(*) AS n FROM sandboxes GROUP BY state')
      .all() as { state: SandboxState; n: number }[];
    for (const r of rows) counts[r.state] = r.n;
    return counts;
  }
}
