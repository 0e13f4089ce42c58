/**
 * The database schema as an ordered list of migrations; `PRAGMA user_version` records how
 * many have run. Append new steps, never edit old ones: a daemon upgraded in place must
 * migrate the file the previous version left.
 */
import type Database from 'better-sqlite3';

/** Each entry moves the schema from version i to i + 1. */
export const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE sandboxes (
    id          TEXT PRIMARY KEY,
    state       TEXT NOT NULL CHECK (state IN ('starting', 'running', 'stopped', 'dead')),
    image       TEXT,
    snapshot    TEXT,
    parent      TEXT,
    memory_mib  INTEGER NOT NULL,
    cpus        INTEGER NOT NULL,
    labels      TEXT NOT NULL DEFAULT '{}',
    env         TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL,
    expires_at  TEXT,
    pid         INTEGER,
    dir         TEXT NOT NULL,
    reason      TEXT,
    updated_at  TEXT NOT NULL
  );
  CREATE INDEX sandboxes_by_state ON sandboxes (state);

  CREATE TABLE snapshots (
    tag         TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    parent      TEXT,
    source      TEXT,
    dir         TEXT NOT NULL,
    manifest    TEXT NOT NULL DEFAULT '{}',
    size_bytes  INTEGER,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
  );

  CREATE TABLE lineage (
    child_kind   TEXT NOT NULL CHECK (child_kind IN ('snapshot', 'sandbox')),
    child        TEXT NOT NULL,
    parent_kind  TEXT NOT NULL CHECK (parent_kind IN ('snapshot', 'sandbox', 'image')),
    parent       TEXT NOT NULL,
    relation     TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (child_kind, child)
  );
  CREATE INDEX lineage_by_parent ON lineage (parent_kind, parent);

  CREATE TABLE audit (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    at           TEXT NOT NULL,
    principal    TEXT NOT NULL,
    method       TEXT NOT NULL,
    route        TEXT NOT NULL,
    target       TEXT,
    status       INTEGER NOT NULL,
    code         TEXT,
    duration_ms  REAL NOT NULL
  );
  CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
  CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
  `,
  // 2: a snapshot's VMM pool size survives daemon restarts.
  `ALTER TABLE snapshots ADD COLUMN pool_size INTEGER NOT NULL DEFAULT 0;`,
  // 3: the snapshot a sandbox's disk layers on (its fork source, then its latest branch).
  `ALTER TABLE sandboxes ADD COLUMN disk_base TEXT;
   UPDATE sandboxes SET disk_base = snapshot;`,
  // 4: whether a snapshot's pool is pre-warmed.
  `ALTER TABLE snapshots ADD COLUMN pool_prewarm INTEGER NOT NULL DEFAULT 0;`,
  // 5: a branch's disk switch is recorded before it is made, so a daemon killed anywhere in
  // it (or in its repair) finishes or undoes it at start; a sandbox whose chain could not be
  // repaired says why.
  `CREATE TABLE branch_intents (
     tag          TEXT PRIMARY KEY,
     sandbox      TEXT NOT NULL,
     frozen_node  TEXT NOT NULL,
     frozen_file  TEXT NOT NULL,
     next_node    TEXT NOT NULL,
     next_file    TEXT NOT NULL,
     size         INTEGER NOT NULL,
     created_at   TEXT NOT NULL
   );
   ALTER TABLE sandboxes ADD COLUMN disk_problem TEXT;`,
  // 6: why a snapshot failed (a branch cut off by a crash is kept, `failed`, with the reason).
  `ALTER TABLE snapshots ADD COLUMN reason TEXT;`,
  // 7: a sandbox's resource limits (JSON: memory_bytes, cpu, pids, cgroup; docs/limits.md).
  `ALTER TABLE sandboxes ADD COLUMN limits TEXT;`,
  // 8: how awake a running sandbox is (running, paused, hibernated; docs/idle.md) and its
  // idle policy (JSON: pause_after_s, hibernate_after_s), so a paused one stays paused.
  `ALTER TABLE sandboxes ADD COLUMN tier TEXT NOT NULL DEFAULT 'running';
   ALTER TABLE sandboxes ADD COLUMN idle TEXT;`,
  // 9: a timeout held by a pause (E2B's: a paused sandbox does not expire): the seconds of
  // it left, given back by the wake (docs/idle.md "The timeout of a paused sandbox").
  `ALTER TABLE sandboxes ADD COLUMN timeout_held_s INTEGER;`,
];

/** Run the migrations `db` has not seen yet, each in its own transaction. */
export function migrate(db: Database.Database): number {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > MIGRATIONS.length) {
    throw new Error(
      `${db.name} has schema version ${current}, newer than this forkd knows ` +
        `(${MIGRATIONS.length}): upgrade forkd, or point FORKD_HOME elsewhere`,
    );
  }
  for (let v = current; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v] as string);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
  return MIGRATIONS.length;
}
