/**
 * Branch, chains and lineage routes against the fake services: what each route hands the
 * snapshot service and answers (BranchResult with its children, a compacted Snapshot, the
 * flat Lineage), depth/ancestors/dependents of a chain, rmi refusing to orphan and
 * `cascade`, the field combinations a branch or compact refuses, catalog errors passed
 * through (scrubbed when 5xx), metrics and audit.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { ForkdError } from '../../src/errors.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';

const fake = new FakeServices();
let app: FastifyInstance;

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
});
after(() => app.close());

const CALLER = { principal: 'unix' };
const BRANCH = `/v1/sandboxes/${SEED.sandbox}/branch`;

interface ErrorJson {
  error: { code: string; message: string; details?: Record<string, unknown> };
}
interface SnapshotJson {
  tag: string;
  state: string;
  parent: string | null;
  source_sandbox: string | null;
  labels: Record<string, string>;
  depth: number;
  ancestors: string[];
  dependents: string[];
}
interface BranchJson {
  snapshot: SnapshotJson;
  mode: string;
  pause_ms: number;
  captured_bytes: number;
  timings: Record<string, number>;
  children?: {
    sandboxes: { id: string; snapshot: string }[];
    failed: { index: number; error: ErrorJson['error'] }[];
  };
}
interface LineageJson {
  nodes: { kind: string; id: string; parent: { kind: string; id: string } | null }[];
}

const lastCall = () => fake.serviceCalls().at(-1)!;

/** inject, with the JSON answer typed as the caller expects. */
async function call<T = unknown>(opts: InjectOptions | string) {
  const res = await app.inject(opts);
  return { status: res.statusCode, body: res.json() as T, res };
}

const branch = (payload: Record<string, unknown>, url = BRANCH) =>
  call<BranchJson & ErrorJson>({ method: 'POST', url, payload });

const compact = (tag: string, to: string) =>
  call<SnapshotJson & ErrorJson>({
    method: 'POST',
    url: `/v1/snapshots/${tag}/compact`,
    payload: { to },
  });

/** warm → (fork, branch) b1 → (fork, branch) b2: a chain of depth 2. */
async function chain(): Promise<void> {
  for (const [from, tag] of [
    [SEED.snapshot, 'b1'],
    ['b1', 'b2'],
  ] as const) {
    const child = await call<{ id: string }>({
      method: 'POST',
      url: '/v1/sandboxes',
      payload: { snapshot: from },
    });
    const made = await branch({ tag }, `/v1/sandboxes/${child.body.id}/branch`);
    assert.equal(made.status, 201, JSON.stringify(made.body));
  }
}

// ---- branch ---------------------------------------------------------------------------

test('branch passes id, body and principal; answers 201 BranchResult', async () => {
  fake.reset();
  const body = { tag: 'b1', labels: { step: '3' }, mode: 'live' };
  const { status, body: result } = await branch(body);
  assert.equal(status, 201);
  assert.deepEqual(lastCall(), {
    service: 'branch',
    method: 'branch',
    args: [SEED.sandbox, body, CALLER],
  });
  assert.equal(result.snapshot.tag, 'b1');
  assert.equal(result.snapshot.source_sandbox, SEED.sandbox);
  assert.deepEqual(result.snapshot.labels, { step: '3' });
  assert.equal(result.mode, 'live');
  assert.equal(result.pause_ms, 42.5);
  assert.equal(result.captured_bytes, 3 * 1024 * 1024);
  assert.equal(typeof result.timings.pause_ms, 'number');
  assert.equal(result.children, undefined, 'no children without fork');
  const source = await call<{ state: string }>(`/v1/sandboxes/${SEED.sandbox}`);
  assert.equal(source.body.state, 'running', 'the source keeps running');
});

test('branch without a tag gets one from the service; no_wait answers it writing', async () => {
  fake.reset();
  const { status, body } = await branch({ no_wait: true, fork: 0 });
  assert.equal(status, 201);
  assert.match(body.snapshot.tag, /^[a-z0-9][a-z0-9._-]*$/);
  assert.equal(body.snapshot.state, 'writing');
});

test('branch with fork: children of the new snapshot, failures scrubbed', async () => {
  fake.reset();
  fake.failingChildren.add(1);
  const { status, body } = await branch({ tag: 'b1', fork: 3 });
  assert.equal(status, 201);
  assert.equal(body.children!.sandboxes.length, 2);
  for (const s of body.children!.sandboxes) assert.equal(s.snapshot, 'b1');
  assert.deepEqual(
    body.children!.failed.map((f) => [f.index, f.error.code]),
    [[1, 'boot_failed']],
  );
  assert.doesNotMatch(JSON.stringify(body.children), /\/var/);
});

test('branch errors: unknown sandbox 404, taken tag 409, capacity 503 with Retry-After', async () => {
  fake.reset();
  const missing = await branch({}, '/v1/sandboxes/sbx-0000000000ff/branch');
  assert.deepEqual([missing.status, missing.body.error.code], [404, 'sandbox_not_found']);
  const taken = await branch({ tag: SEED.snapshot });
  assert.deepEqual([taken.status, taken.body.error.code], [409, 'name_taken']);
  fake.failWith(
    'branch',
    'branch',
    new ForkdError('capacity', 'too many branches in flight', { retry_after_s: 2 }),
  );
  const busy = await branch({ tag: 'b9' });
  assert.deepEqual([busy.status, busy.body.error.code], [503, 'capacity']);
  assert.equal(busy.res.headers['retry-after'], '2');
  fake.failWith('branch', 'branch', new Error('qmp /var/lib/forkd/sandboxes/x/qmp.sock gone'));
  const crash = await branch({ tag: 'b9' });
  assert.deepEqual([crash.status, crash.body.error.code], [500, 'internal']);
  assert.doesNotMatch(crash.res.body, /\/var|qmp/);
});

test('branch refuses no_wait with fork (400 naming the field; no service call)', async () => {
  fake.reset();
  const { status, body } = await branch({ tag: 'b1', fork: 2, no_wait: true });
  assert.equal(status, 400);
  assert.equal(body.error.details?.field, 'body.no_wait');
  assert.deepEqual(fake.serviceCalls(), []);
});

test("branch with fork and idle: the children's policy; idle without fork refused", async () => {
  fake.reset();
  const { status, body } = await branch({ tag: 'b1', fork: 2, idle: { pause_after_s: 30 } });
  assert.equal(status, 201);
  for (const s of body.children!.sandboxes) {
    assert.deepEqual((s as { idle?: unknown }).idle, {
      pause_after_s: 30,
      hibernate_after_s: 600,
      source: 'sandbox',
    });
  }
  fake.reset();
  const alone = await branch({ tag: 'b2', idle: { pause_after_s: 30 } });
  assert.equal(alone.status, 400);
  assert.equal(alone.body.error.details?.field, 'body.idle');
  assert.deepEqual(fake.serviceCalls(), []);
});

// ---- chains ---------------------------------------------------------------------------

test('a chain: depth, ancestors and dependents along it', async () => {
  fake.reset();
  await chain();
  const get = async (tag: string) => (await call<SnapshotJson>(`/v1/snapshots/${tag}`)).body;
  const [warm, b1, b2] = [await get(SEED.snapshot), await get('b1'), await get('b2')];
  assert.deepEqual([warm.depth, warm.ancestors, warm.dependents], [0, [], ['b1', 'b2']]);
  assert.deepEqual(
    [b1.depth, b1.parent, b1.ancestors, b1.dependents],
    [1, 'warm', ['warm'], ['b2']],
  );
  assert.deepEqual([b2.depth, b2.ancestors, b2.dependents], [2, ['b1', 'warm'], []]);
});

test('compact: 201 standalone Snapshot under the new tag; the service gets both tags', async () => {
  fake.reset();
  await chain();
  const { status, body } = await compact('b2', 'flat');
  assert.equal(status, 201);
  assert.deepEqual([body.tag, body.parent, body.depth, body.ancestors], ['flat', null, 0, []]);
  assert.deepEqual(lastCall(), {
    service: 'snapshots',
    method: 'compact',
    args: ['b2', 'flat', CALLER],
  });
});

test('compact errors: same tag 400, unknown 404, taken 409', async () => {
  fake.reset();
  const same = await compact(SEED.snapshot, SEED.snapshot);
  assert.deepEqual([same.status, same.body.error.details?.field], [400, 'body.to']);
  assert.deepEqual(fake.serviceCalls(), []);
  const missing = await compact('nope', 'flat');
  assert.deepEqual([missing.status, missing.body.error.code], [404, 'snapshot_not_found']);
  const taken = await compact(SEED.snapshot, SEED.brokenSnapshot);
  assert.deepEqual([taken.status, taken.body.error.code], [409, 'name_taken']);
});

test('rmi refuses to orphan (409 naming dependents); cascade removes exactly the subtree', async () => {
  fake.reset();
  await chain();
  const refused = await call<ErrorJson>({ method: 'DELETE', url: '/v1/snapshots/b1' });
  assert.deepEqual([refused.status, refused.body.error.code], [409, 'snapshot_in_use']);
  assert.deepEqual(refused.body.error.details, { tag: 'b1', snapshots: ['b2'] });
  const busy = await call<ErrorJson>({ method: 'DELETE', url: '/v1/snapshots/b1?cascade=true' });
  assert.equal(busy.status, 409, 'sandboxes still run from b1 and b2: cascade alone refuses');
  const both = await app.inject({
    method: 'DELETE',
    url: '/v1/snapshots/b1?cascade=true&force=true',
  });
  assert.equal(both.statusCode, 204);
  assert.deepEqual(lastCall().args, ['b1', { force: true, cascade: true }]);
  const left = await call<{ snapshots: SnapshotJson[] }>('/v1/snapshots');
  assert.deepEqual(
    left.body.snapshots.map((s) => [s.tag, s.dependents]),
    [
      [SEED.snapshot, []],
      [SEED.brokenSnapshot, []],
    ],
  );
});

// ---- lineage --------------------------------------------------------------------------

test('lineage: every image, snapshot and live sandbox with its parent edge', async () => {
  fake.reset();
  await chain();
  const { status, body } = await call<LineageJson>('/v1/lineage');
  assert.equal(status, 200);
  assert.deepEqual(lastCall().args, [undefined]);
  const edge = (id: string) => body.nodes.find((n) => n.id === id)?.parent;
  assert.deepEqual(edge(SEED.image), null);
  assert.deepEqual(edge(SEED.snapshot), { kind: 'image', id: SEED.image });
  assert.deepEqual(edge('b2'), { kind: 'snapshot', id: 'b1' });
  assert.deepEqual(edge(SEED.sandbox), { kind: 'image', id: SEED.image });
  assert.ok(body.nodes.some((n) => n.kind === 'sandbox' && n.parent?.id === 'b1'));
});

test('lineage?tag= passes the tag and answers its subtree; an unknown tag is 404', async () => {
  fake.reset();
  await chain();
  const { body } = await call<LineageJson>('/v1/lineage?tag=b1');
  assert.deepEqual(lastCall().args, ['b1']);
  const ids = body.nodes.map((n) => `${n.kind}:${n.id}`);
  assert.ok(ids.includes('snapshot:b1') && ids.includes('snapshot:b2'));
  assert.ok(!ids.includes(`snapshot:${SEED.snapshot}`) && !ids.includes(`image:${SEED.image}`));
  const missing = await call<ErrorJson>('/v1/lineage?tag=nope');
  assert.deepEqual([missing.status, missing.body.error.code], [404, 'snapshot_not_found']);
});

// ---- metrics and audit ----------------------------------------------------------------

test('metrics: branches counted, their children as forks, the pause in a histogram', async () => {
  const local = new FakeServices();
  const a = await buildApp(local.services, { requireAuth: false });
  const inject = (payload: Record<string, unknown>) =>
    a.inject({ method: 'POST', url: BRANCH, payload });
  await inject({ tag: 'b1', fork: 2 });
  await inject({ tag: 'b2' });
  await inject({ tag: 'b1' }); // taken: not counted
  const text = (await a.inject('/metrics')).body;
  for (const line of [
    'forkd_branches_total 2',
    'forkd_forks_total 2',
    'forkd_branch_pause_seconds_count 2',
    'forkd_branch_pause_seconds_sum 0.085',
    'forkd_branch_pause_seconds_bucket{le="0.04"} 0',
    'forkd_branch_pause_seconds_bucket{le="0.05"} 2',
    'forkd_errors_total{code="name_taken"} 1',
  ]) {
    assert.ok(text.includes(line), line);
  }
  await a.close();
});

test('audit: a branch under its sandbox id, a compact under its source tag', async () => {
  fake.reset();
  await branch({ tag: 'b1' });
  await branch({ tag: 'b1' });
  await compact(SEED.snapshot, 'flat');
  assert.deepEqual(
    fake.audit.map((e) => [e.route, e.target, e.status, e.code]),
    [
      ['/v1/sandboxes/:id/branch', SEED.sandbox, 201, null],
      ['/v1/sandboxes/:id/branch', SEED.sandbox, 409, 'name_taken'],
      ['/v1/snapshots/:tag/compact', SEED.snapshot, 201, null],
    ],
  );
});
