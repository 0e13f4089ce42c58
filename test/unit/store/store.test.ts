/**
 * The SQLite store without VMs: schema migrations, WAL and file mode, sandbox rows and
 * their filters, the append-only audit log (and its JSON-lines file).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Store } from '../../../src/store/db.js';
import { MIGRATIONS } from '../../../src/store/migrations.js';
import type { SandboxRow } from '../../../src/store/sandboxes.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'forkd-store-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

function row(
  id: string,
  over: Partial<SandboxRow> = {},
): Omit<SandboxRow, 'updated_at' | 'disk_base' | 'disk_problem' | 'tier'> {
  return {
    ...{ id, state: 'running', image: 'busybox', snapshot: null, parent: null },
    ...{ memory_mib: 256, cpus: 1, labels: {}, env: {}, created_at: new Date().toISOString() },
    ...{ expires_at: null, pid: 123, dir: `/x/${id}`, reason: null },
    ...over,
  };
}

test('a new database is migrated, in WAL mode, and readable by its owner only', async () => {
  const path = join(dir, 'a.db');
  const store = Store.open(path);
  assert.equal(store.db.pragma('user_version', { simple: true }), MIGRATIONS.length);
  assert.equal(store.db.pragma('journal_mode', { simple: true }), 'wal');
  const tables = store.db
    .prepare(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
    .all()
    .map((r) => (r as { name: string }).name);
  for (const t of ['audit', 'lineage', 'sandboxes', 'snapshots']) assert.ok(tables.includes(t), t);
  store.close();
  assert.equal((await stat(path)).mode & 0o777, 0o600);
  // Opening again runs nothing twice and keeps the data.
  Store.open(path).close();
});

test('a database from a newer forkd is refused with a clear message', () => {
  const path = join(dir, 'newer.db');
  const db = new Database(path);
  db.pragma(`user_version = ${MIGRATIONS.length + 1}`);
  db.close();
  assert.throws(() => Store.open(path), /newer than this forkd knows/);
});

test('sandbox rows: insert, update, filter by state, count, prune ended ones', () => {
  const store = Store.open(join(dir, 'rows.db'));
  try {
    const rows = store.sandboxes;
    rows.insert(row('sbx-000000000001', { labels: { team: 'a' }, env: { K: 'v' } }));
    rows.insert(row('sbx-000000000002', { state: 'starting', pid: null }));
    rows.insert(row('sbx-000000000003', { state: 'dead', reason: 'gone' }));
    assert.deepEqual(rows.get('sbx-000000000001')?.labels, { team: 'a' });
    assert.deepEqual(rows.get('sbx-000000000001')?.env, { K: 'v' });
    assert.deepEqual(
      rows.active().map((r) => r.id),
      ['sbx-000000000002', 'sbx-000000000001'],
    );
    const updated = rows.update('sbx-000000000002', { state: 'running', pid: 42 });
    assert.equal(updated?.state, 'running');
    assert.equal(updated?.pid, 42);
    assert.deepEqual(rows.countByState(), { starting: 0, running: 2, stopped: 0, dead: 1 });
    assert.equal(rows.pruneEnded(new Date(Date.now() - 60_000).toISOString()), 0);
    assert.equal(rows.pruneEnded(new Date(Date.now() + 60_000).toISOString()), 1);
    assert.equal(rows.get('sbx-000000000003'), undefined);
    assert.throws(() => rows.update('sbx-000000000001', { state: 'bogus' as never }));
  } finally {
    store.close();
  }
});

test('the audit log is append-only and mirrored to the audit file', async () => {
  const file = join(dir, 'audit.jsonl');
  const store = Store.open(join(dir, 'audit.db'), { auditFile: file });
  try {
    const entry = {
      ...{ at: new Date().toISOString(), principal: 'unix', method: 'DELETE' },
      ...{ route: '/v1/sandboxes/:id', target: 'sbx-000000000001', status: 204 },
      ...{ code: null, duration_ms: 12.5 },
    };
    store.audit.record(entry);
    store.audit.record({ ...entry, status: 404, code: 'sandbox_not_found' });
    assert.deepEqual(store.audit.recent(), [
      entry,
      { ...entry, status: 404, code: 'sandbox_not_found' },
    ]);
    assert.throws(() => store.db.exec(`UPDATE audit SET status = 200`), /append-only/);
    assert.throws(() => store.db.exec(`DELETE FROM audit`), /append-only/);
    const lines = (await readFile(file, 'utf8')).trim().split('\n');
    assert.deepEqual(JSON.parse(lines[0] as string), entry);
    assert.equal(lines.length, 2);
    assert.equal((await stat(file)).mode & 0o777, 0o600);
  } finally {
    store.close();
  }
});
