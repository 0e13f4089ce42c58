/**
 * Snapshot routes and forks against the fake services: what each route hands the snapshot
 * service and answers, its catalog errors, the ForkResult of a fork of n (partial failure,
 * all-or-nothing, scrubbed child errors), a fork without n answering like a boot, the
 * field combinations a boot and a fork refuse, and streaming create over a real socket
 * (progress arrives as reported; failures before and after the first line; a client that
 * leaves aborts the create).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';
import { assertSpread, listenLocal, post, readLines, readText, until } from './socket-client.js';

const fake = new FakeServices();
let app: FastifyInstance;
let port: number;

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
  port = await listenLocal(app);
});
after(() => app.close());

const SNAP = `/v1/snapshots/${SEED.snapshot}`;
const CALLER = { principal: 'unix' };

interface ErrorJson {
  error: { code: string; message: string; details?: Record<string, unknown> };
}
interface SandboxJson {
  id: string;
  state: string;
  snapshot: string | null;
  labels: Record<string, string>;
}
interface ForkJson {
  sandboxes: SandboxJson[];
  failed: { index: number; error: ErrorJson['error'] }[];
}

const lastCall = () => fake.serviceCalls().at(-1)!;

/** inject, with the JSON answer typed as the caller expects. */
async function call<T = unknown>(opts: InjectOptions | string) {
  const res = await app.inject(opts);
  return { status: res.statusCode, body: res.json() as T, res };
}

const fork = (payload: Record<string, unknown>) =>
  call<ForkJson & SandboxJson & ErrorJson>({ method: 'POST', url: '/v1/sandboxes', payload });

// ---- create, list, get, verify, pool, remove ------------------------------------------

test('create passes the body without `stream`, the principal and a progress callback', async () => {
  fake.reset();
  const body = { tag: 'py', image: SEED.image, warm: ['echo hi'], labels: { k: 'v' } };
  const { status, body: snap } = await call<{ tag: string; labels: Record<string, string> }>({
    method: 'POST',
    url: '/v1/snapshots',
    payload: { ...body, stream: false },
  });
  assert.equal(status, 201);
  assert.equal(snap.tag, 'py');
  assert.deepEqual(snap.labels, { k: 'v' });
  const { method, args } = lastCall();
  assert.equal(method, 'create');
  assert.deepEqual(args.slice(0, 2), [body, CALLER]);
  assert.equal(typeof args[2], 'function');
});

test('create: a taken tag is 409, an unknown image 404, wait_for with wait_port 400', async () => {
  fake.reset();
  const taken = await call<ErrorJson>({
    method: 'POST',
    url: '/v1/snapshots',
    payload: { tag: SEED.snapshot },
  });
  assert.deepEqual([taken.status, taken.body.error.code], [409, 'name_taken']);
  const noImage = await call<ErrorJson>({
    method: 'POST',
    url: '/v1/snapshots',
    payload: { tag: 'x', image: 'nope' },
  });
  assert.deepEqual([noImage.status, noImage.body.error.code], [404, 'image_not_found']);
  fake.reset();
  const both = await call<ErrorJson>({
    method: 'POST',
    url: '/v1/snapshots',
    payload: { tag: 'x', wait_for: 'true', wait_port: 80 },
  });
  assert.equal(both.status, 400);
  assert.equal(both.body.error.details?.field, 'body.wait_port');
  assert.deepEqual(fake.serviceCalls(), []);
});

test('list and get show children alive, pool and bootable; an unknown tag is 404', async () => {
  fake.reset();
  await fork({ snapshot: SEED.snapshot, n: 2 });
  const list = await call<{ snapshots: { tag: string; children_alive: number }[] }>(
    '/v1/snapshots',
  );
  assert.deepEqual(
    list.body.snapshots.map((s) => [s.tag, s.children_alive]),
    [
      [SEED.snapshot, 2],
      [SEED.brokenSnapshot, 0],
    ],
  );
  const one = await call<{ tag: string; files: { name: string }[]; pool: unknown }>(SNAP);
  assert.equal(one.status, 200);
  assert.deepEqual(
    one.body.files.map((f) => f.name),
    ['memory', 'vmstate', 'disk.qcow2'],
  );
  assert.deepEqual(one.body.pool, { size: 0, ready: 0, prewarm: false, memory_bytes: 0 });
  const broken = await call<{ bootable: boolean; reason: string }>(
    `/v1/snapshots/${SEED.brokenSnapshot}`,
  );
  assert.equal(broken.body.bootable, false);
  assert.match(broken.body.reason, /memory/);
  const missing = await call<ErrorJson>('/v1/snapshots/nope');
  assert.deepEqual([missing.status, missing.body.error.code], [404, 'snapshot_not_found']);
});

test('unknown fields from the service are not sent', async () => {
  const local = new FakeServices();
  const get = local.services.snapshots.get.bind(local.services.snapshots);
  local.services.snapshots.get = async (tag) =>
    ({ ...(await get(tag)), staging_dir: '/var/lib/forkd/x' }) as never;
  const a = await buildApp(local.services, { requireAuth: false });
  const res = await a.inject(SNAP);
  assert.equal(res.statusCode, 200);
  assert.doesNotMatch(res.body, /staging_dir/);
  await a.close();
});

test('verify answers the problems; it takes no body', async () => {
  fake.reset();
  const ok = await call({ method: 'POST', url: `${SNAP}/verify` });
  assert.deepEqual(ok.body, { ok: true, problems: [] });
  assert.deepEqual(lastCall().args, [SEED.snapshot]);
  const bad = await call({ method: 'POST', url: `/v1/snapshots/${SEED.brokenSnapshot}/verify` });
  assert.deepEqual(bad.body, { ok: false, problems: [{ file: 'memory', problem: 'missing' }] });
  const body = await call({ method: 'POST', url: `${SNAP}/verify`, payload: { deep: true } });
  assert.equal(body.status, 400);
});

test('pool: PUT passes the size and answers the pool state', async () => {
  fake.reset();
  const res = await call({ method: 'PUT', url: `${SNAP}/pool`, payload: { size: 4 } });
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, {
    size: 4,
    ready: 4,
    prewarm: false,
    memory_bytes: 4 * 16 * 1024 * 1024,
    held: 0,
    budget: {
      vms: 8,
      memory_bytes: 384 * 1024 * 1024,
      used_vms: 4,
      used_memory_bytes: 4 * 16 * 1024 * 1024,
    },
  });
  assert.deepEqual(lastCall().args, [SEED.snapshot, 4, { prewarm: undefined }]);
  const missing = await call<ErrorJson>({
    method: 'PUT',
    url: '/v1/snapshots/nope/pool',
    payload: { size: 1 },
  });
  assert.equal(missing.status, 404);
});

test('remove refuses while children run (409), force kills them, then 404', async () => {
  fake.reset();
  await fork({ snapshot: SEED.snapshot, n: 2 });
  const refused = await call<ErrorJson>({ method: 'DELETE', url: SNAP });
  assert.deepEqual([refused.status, refused.body.error.code], [409, 'snapshot_in_use']);
  assert.deepEqual(lastCall().args, [SEED.snapshot, { force: undefined, cascade: undefined }]);
  const forced = await app.inject({ method: 'DELETE', url: `${SNAP}?force=true` });
  assert.equal(forced.statusCode, 204);
  assert.deepEqual(lastCall().args, [SEED.snapshot, { force: true, cascade: undefined }]);
  const list = await call<{ sandboxes: SandboxJson[] }>('/v1/sandboxes');
  const children = list.body.sandboxes.filter((s) => s.snapshot === SEED.snapshot);
  assert.deepEqual(
    children.map((s) => s.state),
    ['stopped', 'stopped'],
    'force killed them',
  );
  const gone = await app.inject({ method: 'DELETE', url: SNAP });
  assert.equal(gone.statusCode, 404);
});

// ---- fork -----------------------------------------------------------------------------

test('fork of n: 201 ForkResult; the service gets the fork command and the principal', async () => {
  fake.reset();
  const { status, body } = await fork({
    snapshot: SEED.snapshot,
    n: 3,
    labels: { run: '7' },
    env: { A: '1' },
    timeout_s: 60,
  });
  assert.equal(status, 201);
  assert.equal(body.sandboxes.length, 3);
  assert.deepEqual(body.failed, []);
  for (const s of body.sandboxes) {
    assert.match(s.id, /^sbx-[0-9a-f]{12}$/);
    assert.equal(s.snapshot, SEED.snapshot);
    // The fork adds the request's id, shared by the siblings (found by it after a crash).
    assert.deepEqual({ ...s.labels, 'forkd.request': 'id' }, { run: '7', 'forkd.request': 'id' });
  }
  assert.deepEqual(lastCall(), {
    service: 'snapshots',
    method: 'fork',
    args: [
      { snapshot: SEED.snapshot, n: 3, labels: { run: '7' }, env: { A: '1' }, timeout_s: 60 },
      CALLER,
    ],
  });
});

test('fork: a partial failure names the failed children, scrubbed; the rest keep running', async () => {
  fake.reset();
  fake.failingChildren.add(1).add(3);
  const { status, body } = await fork({ snapshot: SEED.snapshot, n: 5 });
  assert.equal(status, 201);
  assert.equal(body.sandboxes.length, 3);
  assert.deepEqual(
    body.failed.map((f) => [f.index, f.error.code]),
    [
      [1, 'boot_failed'],
      [3, 'boot_failed'],
    ],
  );
  assert.doesNotMatch(JSON.stringify(body.failed), /\/var/);
  assert.match(body.failed[0]!.error.message, /<path>/);
  const live = await call<{ sandboxes: SandboxJson[] }>('/v1/sandboxes');
  assert.equal(live.body.sandboxes.filter((s) => s.snapshot === SEED.snapshot).length, 3);
});

test('fork with all_or_nothing: one failure and no child is left', async () => {
  fake.reset();
  fake.failingChildren.add(2);
  const { body } = await fork({ snapshot: SEED.snapshot, n: 4, all_or_nothing: true });
  assert.deepEqual(body.sandboxes, []);
  assert.deepEqual(
    body.failed.map((f) => f.index),
    [2],
  );
  assert.equal((lastCall().args[0] as { all_or_nothing: boolean }).all_or_nothing, true);
});

test('fork without n answers the one Sandbox; its failure is the error answer', async () => {
  fake.reset();
  const one = await fork({ snapshot: SEED.snapshot, labels: { a: 'b' } });
  assert.equal(one.status, 201);
  assert.equal(one.body.snapshot, SEED.snapshot);
  assert.match(one.body.id, /^sbx-/);
  assert.deepEqual(lastCall().args[0], {
    snapshot: SEED.snapshot,
    n: 1,
    labels: { a: 'b' },
  });
  fake.failingChildren.add(0);
  const failed = await fork({ snapshot: SEED.snapshot });
  assert.equal(failed.status, 500);
  assert.equal(failed.body.error.code, 'boot_failed');
  assert.doesNotMatch(failed.res.body, /\/var/);
});

test('fork: an unknown snapshot is 404, a broken one 409 naming the file', async () => {
  fake.reset();
  const missing = await fork({ snapshot: 'nope', n: 2 });
  assert.deepEqual([missing.status, missing.body.error.code], [404, 'snapshot_not_found']);
  const broken = await fork({ snapshot: SEED.brokenSnapshot });
  assert.deepEqual([broken.status, broken.body.error.code], [409, 'snapshot_not_bootable']);
  assert.deepEqual(broken.body.error.details, { file: 'memory' });
});

test('a boot and a fork refuse each other’s fields (400, nothing reaches a service)', async () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ snapshot: SEED.snapshot, image: SEED.image }, 'body.image'],
    [{ snapshot: SEED.snapshot, memory_mib: 512 }, 'body.memory_mib'],
    [{ snapshot: SEED.snapshot, n: 2, cpus: 2 }, 'body.cpus'],
    [{ n: 2 }, 'body.n'],
    [{ image: SEED.image, all_or_nothing: true }, 'body.all_or_nothing'],
  ];
  for (const [payload, field] of cases) {
    fake.reset();
    const { status, body } = await fork(payload);
    assert.equal(status, 400, JSON.stringify(payload));
    assert.equal(body.error.code, 'bad_request');
    assert.equal(body.error.details?.field, field);
    assert.deepEqual(fake.serviceCalls(), [], JSON.stringify(payload));
  }
});

test("a boot from an image, as a fork, takes a caller's network namespace and its ports", async () => {
  const net = { netns: '/run/netns/cni-1234', forward_ports: [8080, 8888] };
  for (const payload of [
    { image: SEED.image, ...net },
    { snapshot: SEED.snapshot, ...net },
  ]) {
    fake.reset();
    const { status } = await fork(payload);
    assert.equal(status, 201, JSON.stringify(payload));
    const { service, args } = lastCall();
    assert.equal(service, 'image' in payload ? 'sandboxes' : 'snapshots');
    assert.deepEqual(
      {
        netns: (args[0] as typeof net).netns,
        forward_ports: (args[0] as typeof net).forward_ports,
      },
      net,
    );
  }
});

test('forks are counted per child in /metrics; pools are gauges by tag', async () => {
  const local = new FakeServices();
  const a = await buildApp(local.services, { requireAuth: false });
  local.failingChildren.add(0);
  await a.inject({ method: 'POST', url: '/v1/sandboxes', payload: { snapshot: 'warm', n: 4 } });
  await a.inject({ method: 'POST', url: '/v1/sandboxes', payload: {} });
  await a.inject({ method: 'PUT', url: `${SNAP}/pool`, payload: { size: 3 } });
  const text = (await a.inject('/metrics')).body;
  for (const line of [
    'forkd_forks_total 3',
    'forkd_boots_total 1',
    `forkd_snapshot_pool_size{tag="${SEED.snapshot}"} 3`,
    `forkd_snapshot_pool_ready{tag="${SEED.snapshot}"} 3`,
    `forkd_snapshot_pool_size{tag="${SEED.brokenSnapshot}"} 0`,
    `forkd_snapshot_pool_memory_bytes{tag="${SEED.snapshot}"} ${3 * 16 * 1024 * 1024}`,
    `forkd_snapshot_pool_held{tag="${SEED.snapshot}"} 0`,
    // The host-wide budget (the fake's: the daemon's defaults) and what the pools take of it.
    'forkd_pool_budget_vms 8',
    `forkd_pool_budget_memory_bytes ${384 * 1024 * 1024}`,
    'forkd_pool_vms 3',
    `forkd_pool_memory_bytes ${3 * 16 * 1024 * 1024}`,
  ]) {
    assert.ok(text.includes(line), line);
  }
  assert.doesNotMatch(text, /forkd_snapshot_pool_memory_bytes\{tag="broken"\}/, 'no pool VMs');
  local.failWith('snapshots', 'list', new Error('store locked'));
  const failing = await a.inject('/metrics');
  assert.equal(failing.statusCode, 200, 'a failing listing does not fail the scrape');
  assert.doesNotMatch(failing.body, /forkd_snapshot_pool_size\{/);
  await a.close();
});

test('audit: a fork of n under its snapshot tag, a fork of one under the child', async () => {
  fake.reset();
  await fork({ snapshot: SEED.snapshot, n: 2 });
  const one = await fork({ snapshot: SEED.snapshot });
  await call({ method: 'POST', url: '/v1/snapshots', payload: { tag: 'fresh' } });
  assert.deepEqual(
    fake.audit.map((e) => [e.route, e.target, e.status]),
    [
      ['/v1/sandboxes', SEED.snapshot, 201],
      ['/v1/sandboxes', one.body.id, 201],
      ['/v1/snapshots', 'fresh', 201],
    ],
  );
});

// ---- streaming create (a real socket) -------------------------------------------------

test('streamed create: progress lines arrive as reported, then done with the snapshot', async () => {
  fake.reset();
  fake.streamDelayMs = 150;
  const res = await post(port, '/v1/snapshots', {
    tag: 'streamed',
    warm: ['one', 'two'],
    stream: true,
  });
  assert.equal(res.statusCode, 200);
  assert.equal(res.headers['content-type'], 'application/x-ndjson');
  const lines = await readLines(res);
  assert.deepEqual(
    lines.map((l) => (l.event.type === 'progress' ? l.event.message : l.event.type)),
    [`booting ${SEED.image}`, 'warm: one', 'warm: two', 'capturing', 'done'],
  );
  assertSpread(
    lines.slice(0, 4).map((l) => l.at),
    80,
  );
  const done = lines.at(-1)!.event as unknown as { snapshot: { tag: string } };
  assert.deepEqual(done.snapshot, (await app.inject('/v1/snapshots/streamed')).json());
  assert.equal(
    (fake.serviceCalls()[0]!.args[0] as { stream?: boolean }).stream,
    undefined,
    'stream is the route’s business, not the service’s',
  );
});

test('streamed create: a failure before any progress is an ordinary error answer', async () => {
  fake.reset();
  fake.streamDelayMs = 5;
  const res = await post(port, '/v1/snapshots', { tag: SEED.snapshot, stream: true });
  assert.equal(res.statusCode, 409);
  assert.match(res.headers['content-type'] as string, /^application\/json/);
  assert.equal((JSON.parse(await readText(res)) as ErrorJson).error.code, 'name_taken');
});

test('streamed create: a failure after progress is a last error line, scrubbed and audited', async () => {
  fake.reset();
  fake.streamDelayMs = 5;
  const guest = await readLines(
    await post(port, '/v1/snapshots', { tag: 'f1', warm: ['false'], stream: true }),
  );
  assert.deepEqual(
    guest.map((l) => l.event.type),
    ['progress', 'progress', 'error'],
  );
  assert.equal((guest[2]!.event as unknown as ErrorJson).error.code, 'guest_error');
  const crash = await readLines(
    await post(port, '/v1/snapshots', { tag: 'f2', warm: ['crash'], stream: true }),
  );
  const last = crash.at(-1)!.event as unknown as ErrorJson;
  assert.equal(last.error.code, 'internal');
  assert.doesNotMatch(JSON.stringify(last), /\/var|qmp/);
  await until(() => fake.audit.length === 2);
  assert.deepEqual(
    fake.audit.map((e) => [e.target, e.status, e.code]),
    [
      ['f1', 200, 'guest_error'],
      ['f2', 200, 'internal'],
    ],
  );
  const list = (await app.inject('/v1/snapshots')).json() as { snapshots: { tag: string }[] };
  assert.ok(!list.snapshots.some((s) => s.tag === 'f1' || s.tag === 'f2'));
});

test('a client that leaves a streamed create aborts it; the daemon keeps serving', async () => {
  fake.reset();
  fake.streamDelayMs = 5;
  const res = await post(port, '/v1/snapshots', { tag: 'gone', warm: ['forever'], stream: true });
  await readLines(res, 3);
  res.destroy();
  await until(() => fake.createAborted);
  assert.equal((await app.inject('/healthz')).statusCode, 200);
});

test('a client that leaves a buffered create aborts it too', async () => {
  fake.reset();
  fake.streamDelayMs = 5;
  const req = httpRequest({
    host: '127.0.0.1',
    port,
    path: '/v1/snapshots',
    method: 'POST',
    headers: { 'content-type': 'application/json' },
  });
  req.on('error', () => undefined);
  req.end(JSON.stringify({ tag: 'gone', warm: ['forever'] }));
  await until(() => fake.serviceCalls().length > 0);
  await new Promise((resolve) => setTimeout(resolve, 50));
  req.destroy();
  await until(() => fake.createAborted);
});
