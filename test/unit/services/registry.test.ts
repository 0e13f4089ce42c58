/**
 * The snapshot registry when a write fails, without VMs: a real store and real files in a
 * temp FORKD_HOME, and a row write made to fail as SQLite does on a full disk
 * (SQLITE_FULL). A failed publish leaves nothing under its tag (files renamed into place
 * included) unless the writer asks to keep it `failed`; a failed reserve or undo claims
 * nothing that blocks a retry. A listed `failed` or `writing` snapshot is answered as what
 * it is by every verb, never as missing.
 */
import { after, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { paths, type Paths } from '../../../src/config.js';
import { isForkdError } from '../../../src/errors.js';
import { silentLog } from '../../../src/services/log.js';
import { SNAPSHOT_FILES, stagingDir } from '../../../src/services/snapshots/files.js';
import { SnapshotRegistry, type SnapshotMeta } from '../../../src/services/snapshots/registry.js';
import { Store } from '../../../src/store/db.js';
import { wireVmm } from '../../../src/services/vmm-driver.js';

wireVmm(); // reconcile and the registry read disk chains and pids through the VMM

let home: string;
let p: Paths;
let store: Store;
let registry: SnapshotRegistry;
const roots: string[] = [];

beforeEach(async () => {
  store?.close();
  home = await mkdtemp(join(tmpdir(), 'forkd-registry-'));
  roots.push(home);
  p = paths(home);
  await mkdir(p.snapshots, { recursive: true });
  store = Store.open(p.db);
  registry = new SnapshotRegistry({
    paths: p,
    store,
    log: silentLog,
    maxCreating: 1,
    forkedFrom: () => [],
    poolState: async () => ({ size: 0, ready: 0, prewarm: false, memory_bytes: 0 }),
  });
});

after(async () => {
  store?.close();
  for (const r of roots) await rm(r, { recursive: true, force: true });
});

/** The error better-sqlite3 throws when the disk holding the database is full. */
function sqliteFull(): Error {
  return Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
}

/** Make the next `count` calls of a snapshot-row method throw SQLITE_FULL. */
function failRows(method: 'insert' | 'update' | 'delete', count = 1): void {
  const rows = store.snapshots as unknown as Record<string, (...a: unknown[]) => unknown>;
  const real = rows[method]!.bind(rows);
  let left = count;
  rows[method] = (...args: unknown[]) => {
    if (left-- > 0) throw sqliteFull();
    return real(...args);
  };
}

async function staged(tag: string): Promise<string> {
  const dir = await stagingDir(p, tag);
  for (const name of Object.values(SNAPSHOT_FILES)) await writeFile(join(dir, name), name);
  return dir;
}

const meta = (tag: string): SnapshotMeta => ({
  tag,
  image: 'busybox',
  parent: null,
  source_sandbox: 'sbx-000000000000',
  kernel: '6.1',
  qemu: '8.2',
  accel: 'tcg',
  memory_mib: 64,
  cpus: 1,
  created_at: new Date().toISOString(),
  labels: {},
});

async function assertNothingUnder(tag: string): Promise<void> {
  assert.deepEqual(await readdir(p.snapshots), [], 'files left in snapshots/');
  assert.equal(store.snapshots.get(tag), undefined, 'a row left');
  await assert.rejects(registry.get(tag), (e) => isForkdError(e, 'snapshot_not_found'));
  assert.deepEqual(await registry.list(), []);
}

test('publish: the row fails after the rename (full disk): no files, no row, the tag free', async () => {
  registry.reserve('t', 'sbx-000000000000');
  failRows('update');
  await assert.rejects(registry.publish('t', await staged('t'), meta('t')), /disk is full/);
  await assertNothingUnder('t');
  registry.reserve('t', 'sbx-000000000000'); // neither the tag nor the cap (1) is held
  await registry.publish('t', await staged('t'), meta('t'));
  assert.equal((await registry.get('t')).state, 'ready');
});

test('publish with keepFailed (no_wait): listed failed with why, its files gone', async () => {
  registry.reserve('t', 'sbx-000000000000');
  const dir = await staged('t');
  const ready = Promise.reject(new Error('live copy failed: SIGKILL'));
  await assert.rejects(registry.publish('t', dir, meta('t'), { ready, keepFailed: true }));
  const got = await registry.get('t');
  assert.equal(got.state, 'failed');
  assert.match(got.reason ?? '', /SIGKILL/);
  assert.deepEqual(await readdir(p.snapshots), []);
});

test('release: the files a writer renamed into place go; a row that cannot go blocks nothing', async () => {
  registry.reserve('t', null);
  await mkdir(join(p.snapshots, 't'));
  failRows('delete');
  await registry.release('t'); // never throws: its caller is undoing another failure
  assert.ok(!existsSync(join(p.snapshots, 't')));
  assert.equal(store.snapshots.get('t')?.state, 'writing');
  await assert.rejects(registry.get('t'), (e) => isForkdError(e, 'snapshot_not_found'));
  registry.reserve('t', null); // the stale `writing` row is no writer's: taken over
  assert.equal(store.snapshots.list('writing').length, 1);
});

test('reserve: a row insert that fails claims neither the tag nor the cap', async () => {
  failRows('insert');
  assert.throws(() => registry.reserve('a', null), /disk is full/);
  registry.reserve('a', null);
  assert.throws(
    () => registry.reserve('b', null),
    (e) => isForkdError(e, 'capacity'),
  );
});

test('a failed snapshot: every verb says it failed, why, and how to remove it', async () => {
  registry.reserve('t', 'sbx-000000000000');
  const dir = await staged('t');
  const ready = Promise.reject(new Error('live copy failed: SIGKILL'));
  await assert.rejects(registry.publish('t', dir, meta('t'), { ready, keepFailed: true }));
  assert.deepEqual(
    (await registry.list()).map((s) => [s.tag, s.state]),
    [['t', 'failed']],
  );
  const failed = (e: unknown) =>
    isForkdError(e, 'snapshot_failed') &&
    /snapshot "t" failed and cannot be used: live copy failed: SIGKILL; remove it with `forkd rmi t`/.test(
      e.message,
    ) &&
    e.details?.reason === 'live copy failed: SIGKILL';
  await assert.rejects(registry.verify('t'), failed); // was snapshot_not_found
  await assert.rejects(registry.bootable('t'), failed); // what fork, pool, compact, pack use
  assert.throws(
    () => registry.reserve('t', null),
    (e) => isForkdError(e, 'name_taken') && /failed .*forkd rmi t/.test(e.message),
  );
  await registry.delete('t');
  await assert.rejects(registry.verify('t'), (e) => isForkdError(e, 'snapshot_not_found'));
});

test('a snapshot still being written (no_wait) is listed `writing`; using it says so', async () => {
  registry.reserve('w', 'sbx-000000000000');
  registry.writing(meta('w'), '/x/sbx-000000000000');
  assert.deepEqual(
    (await registry.list()).map((s) => [s.tag, s.state]),
    [['w', 'writing']],
  );
  await assert.rejects(registry.bootable('w'), (e) => isForkdError(e, 'snapshot_writing'));
  await registry.publish('w', await staged('w'), meta('w'));
  assert.deepEqual(
    (await registry.list()).map((s) => [s.tag, s.state]),
    [['w', 'ready']],
  );
});
