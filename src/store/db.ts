/**
 * forkd.db: one SQLite file per FORKD_HOME (better-sqlite3, WAL), opened by the daemon.
 * Holds sandboxes, snapshots, lineage, branch intents and the audit log; images live on disk as their own
 * source of truth (src/services/images). Readable by its owner only: rows carry sandbox env.
 */
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { AuditRows } from './audit.js';
import { RowChanges } from './changes.js';
import { BranchIntentRows } from './intents.js';
import { migrate } from './migrations.js';
import { SandboxRows } from './sandboxes.js';
import { SnapshotRows } from './snapshots.js';

export interface StoreOptions {
  /** Also append audit entries as JSON lines to this file. */
  auditFile?: string;
}

/** The open database and its tables. */
export class Store {
  readonly sandboxes: SandboxRows;
  readonly snapshots: SnapshotRows;
  readonly audit: AuditRows;
  readonly intents: BranchIntentRows;
  /** Every sandbox and snapshot row written, as it is written (the event stream's source). */
  readonly changes = new RowChanges();

  private constructor(
    readonly db: Database.Database,
    opts: StoreOptions,
  ) {
    this.sandboxes = new SandboxRows(db, this.changes);
    this.snapshots = new SnapshotRows(db, this.changes);
    this.audit = new AuditRows(db, opts.auditFile);
    this.intents = new BranchIntentRows(db);
  }

  /** Open (creating and migrating as needed) the database at `path`. */
  static open(path: string, opts: StoreOptions = {}): Store {
    mkdirSync(dirname(path), { recursive: true });
    // Create it 0600 before SQLite does (it would use 0644); -wal and -shm copy its mode.
    closeSync(openSync(path, 'a', 0o600));
    const db = new Database(path);
    try {
      db.pragma('journal_mode = WAL');
      // NORMAL is durable across a process crash in WAL mode, and much faster than FULL.
      db.pragma('synchronous = NORMAL');
      db.pragma('busy_timeout = 5000');
      db.pragma('foreign_keys = ON');
      migrate(db);
    } catch (e) {
      db.close();
      throw e;
    }
    return new Store(db, opts);
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
