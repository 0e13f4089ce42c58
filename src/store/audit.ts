/**
 * The audit log: one row per mutating API request, append-only (triggers refuse UPDATE and
 * DELETE), and optionally the same entry as a JSON line in a file for log shippers.
 */
import { appendFileSync } from 'node:fs';
import type Database from 'better-sqlite3';

/** One audited request (docs/daemon.md). */
export interface AuditEntry {
  at: string;
  principal: string;
  method: string;
  route: string;
  target: string | null;
  status: number;
  code: string | null;
  duration_ms: number;
}

export class AuditRows {
  private readonly insert: Database.Statement<[AuditEntry]>;

  /** `file`: also append each entry as a JSON line there (created 0600). */
  constructor(
    private readonly db: Database.Database,
    private readonly file?: string,
  ) {
    this.insert = db.prepare(
      `INSERT INTO audit (at, principal, method, route, target, status, code, duration_ms)
       VALUES (@at, @principal, @method, @route, @target, @status, @code, @duration_ms)`,
    );
  }

  /**
   * Synchronous on purpose: the entry is durable before the response leaves, and a failed
   * write is the caller's error rather than a silent gap in the log.
   */
  record(entry: AuditEntry): void {
    this.insert.run(entry);
    if (this.file) appendFileSync(this.file, JSON.stringify(entry) + '\n', { mode: 0o600 });
  }

  /** The last `limit` entries, newest last. */
  recent(limit = 100): AuditEntry[] {
    const rows = this.db
      .prepare(
        `SELECT at, principal, method, route, target, status, code, duration_ms
         FROM audit ORDER BY seq DESC LIMIT ?`,
      )
      .all(limit) as AuditEntry[];
    return rows.reverse();
  }
}
