/**
 * Snapshot rows: which tags exist and in what state. The files and their manifest on disk
 * (src/services/snapshots/files.ts) are the truth about contents; a row is written first
 * as `writing`, so a daemon killed mid-create finds and removes the half-made snapshot.
 */
import type Database from 'better-sqlite3';
import { RowChanges } from './changes.js';

export type SnapshotState = 'writing' | 'ready' | 'failed';

export interface SnapshotRow {
  tag: string;
  state: SnapshotState;
  parent: string | null;
  source: string | null;
  dir: string;
  size_bytes: number | null;
  pool_size: number;
  /** 1 when the pool's VMs are pre-warmed (SQLite has no booleans). */
  pool_prewarm: number;
  /** A branch's manifest-to-be (JSON), kept so a failed one can still be shown. */
  manifest: string;
  /** Why it failed. */
  reason: string | null;
  created_at: string;
  updated_at: string;
}

const now = () => new Date().toISOString();

/** Prepared statements over the `snapshots` table. */
export class SnapshotRows {
  constructor(
    private readonly db: Database.Database,
    private readonly changes = new RowChanges(),
  ) {}

  insert(row: Pick<SnapshotRow, 'tag' | 'state' | 'parent' | 'source' | 'dir'>): SnapshotRow {
    const at = now();
    this.db
      .prepare(
        `INSERT INTO snapshots (tag, state, parent, source, dir, created_at, updated_at)
         VALUES (@tag, @state, @parent, @source, @dir, @at, @at)`,
      )
      .run({ ...row, at });
    this.changes.emit({ table: 'snapshots', key: row.tag, op: 'insert', state: row.state });
    return this.get(row.tag) as SnapshotRow;
  }

  get(tag: string): SnapshotRow | undefined {
    return this.db.prepare('SELECT * FROM snapshots WHERE tag = ?').get(tag) as
      SnapshotRow | undefined;
  }

  list(state?: SnapshotState): SnapshotRow[] {
    const rows = state
      ? this.db.prepare('SELECT * FROM snapshots WHERE state = ? ORDER BY tag').all(state)
      : this.db.prepare('SELECT * FROM snapshots ORDER BY tag').all();
    return rows as SnapshotRow[];
  }

  update(
    tag: string,
    fields: Partial<
      Pick<
        SnapshotRow,
        'state' | 'size_bytes' | 'pool_size' | 'pool_prewarm' | 'manifest' | 'reason'
      >
    >,
  ): void {
    const sets = Object.keys(fields).map((k) => `${k} = @${k}`);
    this.db
      .prepare(`UPDATE snapshots SET ${[...sets, 'updated_at = @at'].join(', ')} WHERE tag = @tag`)
      .run({ ...fields, tag, at: now() });
    const state = fields.state ?? this.get(tag)?.state;
    this.changes.emit({ table: 'snapshots', key: tag, op: 'update', state });
  }

  delete(tag: string): void {
    this.db.prepare('DELETE FROM snapshots WHERE tag = ?').run(tag);
    this.changes.emit({ table: 'snapshots', key: tag, op: 'delete' });
  }
}
