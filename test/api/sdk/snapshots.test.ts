/**
 * The SDK's snapshots against the fake daemon (fake-daemon.ts, which checks every request
 * against the schemas): create buffered and streamed (progress as it arrives, typed errors
 * before and after the first line, a stream cut short, abort), list/get/refresh, verify,
 * pool, remove, and forks — `fork` with partial failure, `forkAll`, `Sandbox.create` with
 * `snapshot`.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  BootFailedError,
  GuestErrorError,
  InternalError,
  NameTakenError,
  Sandbox,
  Snapshot,
  SnapshotInUseError,
  SnapshotNotFoundError,
  TimeoutError,
  type SnapshotInfo,
} from '@forkd/sdk';
import {
  fakeDaemonForFile,
  ID,
  json,
  ndjson,
  noContent,
  sandboxWire,
  snapshotWire,
} from './fake-daemon.js';

const TAG = 'warm';

const INFO: SnapshotInfo = {
  tag: TAG,
  state: 'ready',
  bootable: true,
  image: 'busybox',
  parent: null,
  sourceSandbox: null,
  memoryMib: 256,
  cpus: 1,
  labels: { team: 'a' },
  createdAt: '2025-01-01T00:00:00.000Z',
  kernel: '6.1.0',
  qemu: '8.2.2',
  files: [{ name: 'memory', size: 100, allocated: 40, sha256: 'ab' }],
  logicalBytes: 100,
  physicalBytes: 40,
  childrenAlive: 2,
  pool: { size: 2, ready: 1, prewarm: false, memoryBytes: null, held: 0 }, // an older daemon's
  depth: 0,
  ancestors: [],
  dependents: [],
};

const daemon = fakeDaemonForFile('forkd-sdk-snap-', (fake) =>
  fake.on('GET /v1/snapshots/:tag', (_r, res) => json(res, 200, snapshotWire())),
);
const { fake } = daemon;
const config = { url: daemon.url };

const sent = (route: string) => JSON.parse(fake.last(route)?.body.toString() || 'null');

// ---- create ---------------------------------------------------------------------------

test('create sends the contract body (waitTimeoutMs in whole seconds) and maps the answer', async () => {
  fake.on('POST /v1/snapshots', (_r, res) => json(res, 201, snapshotWire()));
  const snap = await Snapshot.create({
    ...config,
    tag: TAG,
    image: 'busybox',
    memoryMib: 512,
    cpus: 2,
    env: { A: '1' },
    warm: ['echo hi'],
    start: ['sleep 1000'],
    waitPort: 8080,
    waitTimeoutMs: 1500,
    labels: { team: 'a' },
  });
  assert.deepEqual(sent('POST /v1/snapshots'), {
    tag: TAG,
    image: 'busybox',
    memory_mib: 512,
    cpus: 2,
    env: { A: '1' },
    warm: ['echo hi'],
    start: ['sleep 1000'],
    wait_port: 8080,
    wait_timeout_s: 2,
    labels: { team: 'a' },
  });
  assert.equal(snap.tag, TAG);
  assert.deepEqual(snap.info, INFO, 'unknown fields, nested ones too, are dropped');
});

test('create with onProgress streams: messages arrive as sent, then the snapshot', async () => {
  fake.on('POST /v1/snapshots', (_r, res) =>
    ndjson(
      res,
      [
        { type: 'progress', message: 'booting busybox' },
        { type: 'progress', message: 'warm: echo hi' },
        { type: 'progress', message: 'capturing' },
        { type: 'done', snapshot: snapshotWire() },
      ],
      120,
    ),
  );
  const seen: { at: number; message: string }[] = [];
  const snap = await Snapshot.create({
    ...config,
    tag: TAG,
    onProgress: (message) => void seen.push({ at: Date.now(), message }),
  });
  assert.equal(sent('POST /v1/snapshots').stream, true);
  assert.deepEqual(
    seen.map((s) => s.message),
    ['booting busybox', 'warm: echo hi', 'capturing'],
  );
  assert.ok(seen[2]!.at - seen[0]!.at >= 200, 'messages came as they were sent, not at the end');
  assert.deepEqual(snap.info, INFO);
});

test('create errors are typed: an answer before the stream, an error event, a cut stream', async () => {
  const onProgress = () => undefined;
  fake.on('POST /v1/snapshots', (_r, res) =>
    json(res, 409, { error: { code: 'name_taken', message: 'snapshot warm exists' } }),
  );
  await assert.rejects(Snapshot.create({ ...config, tag: TAG, onProgress }), NameTakenError);
  await assert.rejects(Snapshot.create({ ...config, tag: TAG }), NameTakenError);
  fake.on('POST /v1/snapshots', (_r, res) =>
    ndjson(res, [
      { type: 'progress', message: 'warm: false' },
      { type: 'error', error: { code: 'guest_error', message: 'warm command failed: exit 1' } },
    ]),
  );
  await assert.rejects(Snapshot.create({ ...config, tag: TAG, onProgress }), (e: unknown) => {
    assert.ok(e instanceof GuestErrorError);
    assert.match(e.message, /exit 1/);
    return true;
  });
  fake.on('POST /v1/snapshots', (_r, res) =>
    ndjson(res, [{ type: 'progress', message: 'booting' }]),
  );
  await assert.rejects(Snapshot.create({ ...config, tag: TAG, onProgress }), InternalError);
});

test('aborting a streamed create rejects with the reason and closes the connection', async () => {
  let closed = false;
  fake.on('POST /v1/snapshots', (_r, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write(JSON.stringify({ type: 'progress', message: 'booting' }) + '\n');
    res.on('close', () => (closed = true));
  });
  const ac = new AbortController();
  const creating = Snapshot.create({
    ...config,
    tag: TAG,
    signal: ac.signal,
    onProgress: () => ac.abort(new Error('ctrl-c')),
  });
  await assert.rejects(creating, /ctrl-c/);
  for (let i = 0; i < 50 && !closed; i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(closed, 'the daemon saw the client leave');
});

// ---- registry -------------------------------------------------------------------------

test('list, get, refresh; an unknown tag is SnapshotNotFoundError', async () => {
  fake.on('GET /v1/snapshots', (_r, res) =>
    json(res, 200, { snapshots: [snapshotWire(), snapshotWire({ tag: 'b', bootable: false })] }),
  );
  const all = await Snapshot.list(config);
  assert.deepEqual(
    all.map((s) => [s.tag, s.bootable]),
    [
      [TAG, true],
      ['b', false],
    ],
  );
  assert.deepEqual(all[0], INFO);
  const snap = await Snapshot.get(TAG, config);
  assert.equal(fake.last('GET /v1/snapshots/:tag')?.method, 'GET');
  fake.on('GET /v1/snapshots/:tag', (_r, res) =>
    json(res, 200, snapshotWire({ children_alive: 5 })),
  );
  assert.equal((await snap.refresh()).childrenAlive, 5);
  assert.equal(snap.info.childrenAlive, 5);
  fake.on('GET /v1/snapshots/:tag', (_r, res) =>
    json(res, 404, { error: { code: 'snapshot_not_found', message: 'no snapshot nope' } }),
  );
  await assert.rejects(Snapshot.get('nope', config), SnapshotNotFoundError);
});

test('verify, setPool, remove (force as a query), static remove, in-use refusal', async () => {
  fake.on('POST /v1/snapshots/:tag/verify', (_r, res) =>
    json(res, 200, { ok: false, problems: [{ file: 'memory', problem: 'missing', extra: 1 }] }),
  );
  fake.on('PUT /v1/snapshots/:tag/pool', (_r, res) =>
    json(res, 200, { size: 4, ready: 0, prewarm: false, memory_bytes: 0 }),
  );
  fake.on('DELETE /v1/snapshots/:tag', (_r, res) => noContent(res));
  const snap = await Snapshot.get(TAG, config);
  assert.deepEqual(await snap.verify(), {
    ok: false,
    problems: [{ file: 'memory', problem: 'missing' }],
  });
  assert.equal(fake.last('POST /v1/snapshots/:tag/verify')?.body.length, 0, 'verify has no body');
  const pool = { size: 4, ready: 0, prewarm: false, memoryBytes: 0, held: 0 }; // an older daemon's
  assert.deepEqual(await snap.setPool(4), pool);
  assert.deepEqual(sent('PUT /v1/snapshots/:tag/pool'), { size: 4 });
  assert.deepEqual(snap.info.pool, pool);
  await snap.remove();
  assert.deepEqual(fake.last('DELETE /v1/snapshots/:tag')?.query, {});
  await Snapshot.remove(TAG, { ...config, force: true });
  assert.deepEqual(fake.last('DELETE /v1/snapshots/:tag')?.query, { force: true });
  fake.on('DELETE /v1/snapshots/:tag', (_r, res) =>
    json(res, 409, { error: { code: 'snapshot_in_use', message: '2 sandboxes run from warm' } }),
  );
  await assert.rejects(snap.remove(), SnapshotInUseError);
});

// ---- fork -----------------------------------------------------------------------------

test('fork sends the fork body and returns usable Sandboxes and typed failures', async () => {
  fake.on('POST /v1/sandboxes', (_r, res) =>
    json(res, 201, {
      sandboxes: [sandboxWire({ snapshot: TAG }), sandboxWire({ id: 'sbx-00000000000b' })],
      failed: [{ index: 1, error: { code: 'boot_failed', message: 'child 1 did not come up' } }],
    }),
  );
  fake.on('GET /v1/sandboxes/:id', (_r, res) => json(res, 200, sandboxWire({ snapshot: TAG })));
  const snap = await Snapshot.get(TAG, config);
  const { sandboxes, failed } = await snap.fork({
    n: 3,
    labels: { run: '7' },
    envs: { A: '1' },
    timeoutMs: 90_500,
    allOrNothing: false,
  });
  assert.deepEqual(sent('POST /v1/sandboxes'), {
    snapshot: TAG,
    n: 3,
    labels: { run: '7' },
    env: { A: '1' },
    timeout_s: 91,
    all_or_nothing: false,
  });
  assert.deepEqual(
    sandboxes.map((s) => s.id),
    [ID, 'sbx-00000000000b'],
  );
  assert.equal(sandboxes[0]!.info.snapshot, TAG);
  assert.equal((await sandboxes[0]!.refresh()).snapshot, TAG, 'the children are live objects');
  assert.equal(failed.length, 1);
  assert.equal(failed[0]!.index, 1);
  assert.ok(failed[0]!.error instanceof BootFailedError);
});

test('forkAll asks for all or nothing and throws the first failure', async () => {
  fake.on('POST /v1/sandboxes', (_r, res) =>
    json(res, 201, { sandboxes: [sandboxWire(), sandboxWire()], failed: [] }),
  );
  const snap = await Snapshot.get(TAG, config);
  assert.equal((await snap.forkAll(2)).length, 2);
  assert.deepEqual(sent('POST /v1/sandboxes'), { snapshot: TAG, n: 2, all_or_nothing: true });
  fake.on('POST /v1/sandboxes', (_r, res) =>
    json(res, 201, {
      sandboxes: [],
      failed: [{ index: 0, error: { code: 'timeout', message: 'child 0 did not answer' } }],
    }),
  );
  await assert.rejects(snap.forkAll(2), TimeoutError);
});

test('Sandbox.create with snapshot forks one and answers a Sandbox', async () => {
  fake.on('POST /v1/sandboxes', (_r, res) => json(res, 201, sandboxWire({ snapshot: TAG })));
  const sbx = await Sandbox.create({ ...config, snapshot: TAG, labels: { a: 'b' } });
  assert.deepEqual(sent('POST /v1/sandboxes'), { snapshot: TAG, labels: { a: 'b' } });
  assert.equal(sbx.info.snapshot, TAG);
});
