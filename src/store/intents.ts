/**
 * Branch intents: a branch writes down which sandbox, which tag and which disk layers
 * before it makes the sandbox's next layer or switches to it, and clears the row once the
 * snapshot is published or the switch undone. A row found at start is a branch a crash
 * cut short: the branch service finishes or undoes it (src/services/branch/recover.ts).
 */
import type Database from 'better-sqlite3';

export interface BranchIntent {
  tag: string;
  sandbox: string;
  /**
   * The layer the sandbox wrote to before the branch: the snapshot's disk once frozen (its
   * name as the VMM driver knows it; the column is `frozen_node`).
   */
  frozen_layer: string;
  frozen_file: string;
  /** The layer it writes to after the switch, whose header names the snapshot's disk. */
  next_layer: string;
  next_file: string;
  /** The disk's virtual size (bytes). */
  size: number;
  created_at: string;
}

/** Prepared statements over the `branch_intents` table. */
export class BranchIntentRows {
  constructor(private readonly db: Database.Database) {}

  record(intent: Omit<BranchIntent, 'created_at'>): void {
    this.db
      .prepare(
        `INSERT OR REPLACE INTO branch_intents
           (tag, sandbox, frozen_node, frozen_file, next_node, next_file, size, created_at)
         VALUES (@tag, @sandbox, @frozen_layer, @frozen_file, @next_layer, @next_file, @size,
           @created_at)`,
      )
      .run({ ...intent, created_at: new Date().toISOString() });
  }

  clear(tag: string): void {
    this.db.prepare('DELETE FROM branch_intents WHERE tag = ?').run(tag);
  }

  /** Every intent still recorded, oldest first. */
  list(): BranchIntent[] {
    return this.db
      .prepare(
        `SELECT tag, sandbox, frozen_node AS frozen_layer, frozen_file, next_node AS next_layer,
           next_file, size, created_at FROM branch_intents ORDER BY created_at, tag`,
      )
      .all() as BranchIntent[];
  }
}
