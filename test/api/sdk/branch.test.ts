/**
 * The SDK's branch, chain and lineage calls against the fake daemon (which checks every
 * request against the schemas): `sandbox.branch()` sends the contract body and returns a
 * live Snapshot and live children with typed failures; `snapshot.compact()`, `remove` with
 * `cascade`, the chain fields of SnapshotInfo, and `Forkd#lineage`.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  BadRequestError,
  BootFailedError,
  Forkd,
  NameTakenError,
  Sandbox,
  Snapshot,
  SnapshotInUseError,
  SnapshotNotFoundError,
} from '@forkd/sdk';
import {
  fakeDaemonForFile,
  ID,
  json,
  noContent,
  sandboxWire,
  snapshotWire,
} from './fake-daemon.js';

const daemon = fakeDaemonForFile('forkd-sdk-branch-', (fake) =>
  fake.on('GET /v1/sandboxes/:id', (_r, res) => json(res, 200, sandboxWire())),
);
const { fake } = daemon;
const config = { url: daemon.url };

const sent = (route: string) => JSON.parse(fake.last(route)?.body.toString() || 'null');

/** A chained snapshot: b1 over warm, with b2 built on it. */
const chained = snapshotWire({
  tag: 'b1',
  parent: 'warm',
  source_sandbox: ID,
  depth: 1,
  ancestors: ['warm'],
  dependents: ['b2'],
});

const branchAnswer = (over: Record<string, unknown> = {}) => ({
  snapshot: chained,
  pause_ms: 41.7,
  captured_bytes: 2_490_368,
  timings: { pause_ms: 41.7, checksum_ms: 300 },
  unknown_field: 1,
  ...over,
});

// ---- branch ---------------------------------------------------------------------------

test('branch sends the contract body and maps the answer to a live Snapshot', async () => {
  fake.on('POST /v1/sandboxes/:id/branch', (_r, res) => json(res, 201, branchAnswer()));
  fake.on('GET /v1/snapshots/:tag', (_r, res) => json(res, 200, chained));
  const sbx = await Sandbox.connect(ID, config);
  const result = await sbx.branch({ tag: 'b1', labels: { step: '3' }, noWait: true });
  assert.equal(fake.last('POST /v1/sandboxes/:id/branch')?.route, 'POST /v1/sandboxes/:id/branch');
  assert.deepEqual(sent('POST /v1/sandboxes/:id/branch'), {
    tag: 'b1',
    labels: { step: '3' },
    no_wait: true,
  });
  assert.ok(result.snapshot instanceof Snapshot);
  assert.equal(result.snapshot.tag, 'b1');
  assert.deepEqual(
    [result.snapshot.info.depth, result.snapshot.info.ancestors, result.snapshot.info.dependents],
    [1, ['warm'], ['b2']],
  );
  assert.equal(result.snapshot.info.sourceSandbox, ID);
  assert.deepEqual([result.pauseMs, result.capturedBytes], [41.7, 2_490_368]);
  assert.deepEqual(result.timings, { pause_ms: 41.7, checksum_ms: 300 });
  assert.equal(result.children, undefined);
  assert.ok(!('unknown_field' in result));
  assert.equal((await result.snapshot.refresh()).tag, 'b1', 'the snapshot is a live object');
});

test('branch with no options sends an empty body', async () => {
  fake.on('POST /v1/sandboxes/:id/branch', (_r, res) => json(res, 201, branchAnswer()));
  await (await Sandbox.connect(ID, config)).branch();
  assert.deepEqual(sent('POST /v1/sandboxes/:id/branch'), {});
});

test('branch with fork: live children and typed failures', async () => {
  fake.on('POST /v1/sandboxes/:id/branch', (_r, res) =>
    json(
      res,
      201,
      branchAnswer({
        children: {
          sandboxes: [sandboxWire({ id: 'sbx-00000000000b', snapshot: 'b1' })],
          failed: [
            { index: 1, error: { code: 'boot_failed', message: 'child 1 did not come up' } },
          ],
        },
      }),
    ),
  );
  const { children } = await (await Sandbox.connect(ID, config)).branch({ fork: 2 });
  assert.deepEqual(sent('POST /v1/sandboxes/:id/branch'), { fork: 2 });
  assert.deepEqual(
    children!.sandboxes.map((s) => [s.id, s.info.snapshot]),
    [['sbx-00000000000b', 'b1']],
  );
  assert.ok(children!.sandboxes[0] instanceof Sandbox);
  assert.equal(children!.failed[0]!.index, 1);
  assert.ok(children!.failed[0]!.error instanceof BootFailedError);
});

test('branch errors are typed', async () => {
  const sbx = await Sandbox.connect(ID, config);
  fake.on('POST /v1/sandboxes/:id/branch', (_r, res) =>
    json(res, 409, { error: { code: 'name_taken', message: 'snapshot b1 exists' } }),
  );
  await assert.rejects(sbx.branch({ tag: 'b1' }), NameTakenError);
  fake.on('POST /v1/sandboxes/:id/branch', (_r, res) =>
    json(res, 400, {
      error: { code: 'bad_request', message: 'body.no_wait: not with fork', details: {} },
    }),
  );
  await assert.rejects(sbx.branch({ fork: 1, noWait: true }), BadRequestError);
});

// ---- chains ---------------------------------------------------------------------------

test('compact sends the new tag and returns the new standalone Snapshot', async () => {
  fake.on('GET /v1/snapshots/:tag', (_r, res) => json(res, 200, chained));
  fake.on('POST /v1/snapshots/:tag/compact', (_r, res) =>
    json(res, 201, snapshotWire({ tag: 'flat' })),
  );
  const b1 = await Snapshot.get('b1', config);
  const flat = await b1.compact('flat');
  assert.deepEqual(sent('POST /v1/snapshots/:tag/compact'), { to: 'flat' });
  assert.deepEqual([flat.tag, flat.info.parent, flat.info.depth], ['flat', null, 0]);
  assert.equal(b1.tag, 'b1', 'the source stays');
  fake.on('POST /v1/snapshots/:tag/compact', (_r, res) =>
    json(res, 404, { error: { code: 'snapshot_not_found', message: 'no snapshot b1' } }),
  );
  await assert.rejects(b1.compact('flat2'), SnapshotNotFoundError);
});

test('remove: cascade and force as queries; refusing to orphan is SnapshotInUseError', async () => {
  fake.on('GET /v1/snapshots/:tag', (_r, res) => json(res, 200, chained));
  fake.on('DELETE /v1/snapshots/:tag', (_r, res) =>
    json(res, 409, {
      error: {
        code: 'snapshot_in_use',
        message: 'b2 is built on b1',
        details: { tag: 'b1', snapshots: ['b2'] },
      },
    }),
  );
  const b1 = await Snapshot.get('b1', config);
  await assert.rejects(b1.remove(), (e: unknown) => {
    assert.ok(e instanceof SnapshotInUseError);
    assert.deepEqual(e.details, { tag: 'b1', snapshots: ['b2'] });
    return true;
  });
  fake.on('DELETE /v1/snapshots/:tag', (_r, res) => noContent(res));
  await b1.remove({ cascade: true });
  assert.deepEqual(fake.last('DELETE /v1/snapshots/:tag')?.query, { cascade: true });
  await Snapshot.remove('b1', { ...config, cascade: true, force: true });
  assert.deepEqual(fake.last('DELETE /v1/snapshots/:tag')?.query, { force: true, cascade: true });
});

test('an older daemon without chain fields: standalone, no dependents', async () => {
  const old = snapshotWire() as Record<string, unknown>;
  for (const k of ['depth', 'ancestors', 'dependents']) delete old[k];
  fake.on('GET /v1/snapshots/:tag', (_r, res) => json(res, 200, old));
  const info = (await Snapshot.get('warm', config)).info;
  assert.deepEqual([info.depth, info.ancestors, info.dependents], [0, [], []]);
});

// ---- lineage --------------------------------------------------------------------------

test('lineage: camelCase nodes with their edges; tag as a query', async () => {
  const nodes = [
    { kind: 'image', id: 'busybox', parent: null, state: 'ready', created_at: 't0', x: 1 },
    {
      kind: 'snapshot',
      id: 'warm',
      parent: { kind: 'image', id: 'busybox', y: 2 },
      state: 'ready',
      created_at: 't1',
    },
    {
      kind: 'sandbox',
      id: ID,
      parent: { kind: 'snapshot', id: 'warm' },
      state: 'running',
      created_at: 't2',
    },
  ];
  fake.on('GET /v1/lineage', (_r, res) => json(res, 200, { nodes }));
  const forkd = new Forkd(config);
  assert.deepEqual(await forkd.lineage(), [
    { kind: 'image', id: 'busybox', parent: null, state: 'ready', createdAt: 't0' },
    {
      kind: 'snapshot',
      id: 'warm',
      parent: { kind: 'image', id: 'busybox' },
      state: 'ready',
      createdAt: 't1',
    },
    {
      kind: 'sandbox',
      id: ID,
      parent: { kind: 'snapshot', id: 'warm' },
      state: 'running',
      createdAt: 't2',
    },
  ]);
  assert.deepEqual(fake.last('GET /v1/lineage')?.query, {});
  await forkd.lineage({ tag: 'warm' });
  assert.deepEqual(fake.last('GET /v1/lineage')?.query, { tag: 'warm' });
});
