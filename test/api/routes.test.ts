/**
 * What each route hands to the services and answers: bodies and queries pass through typed,
 * files round-trip binary bytes, listings filter by label and state, content types are the
 * contract's.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';

const fake = new FakeServices();
let app: FastifyInstance;
const S = `/v1/sandboxes/${SEED.sandbox}`;
const OCTET = { 'content-type': 'application/octet-stream' };

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
});
after(() => app.close());

const lastCall = () => fake.serviceCalls().at(-1)!;

test('create passes the body and the principal; answers 201 with the sandbox', async () => {
  fake.reset();
  const body = {
    image: SEED.image,
    memory_mib: 512,
    cpus: 2,
    labels: { team: 'a' },
    env: { A: '1' },
  };
  const res = await app.inject({ method: 'POST', url: '/v1/sandboxes', payload: body });
  assert.equal(res.statusCode, 201);
  assert.match((res.json() as { id: string }).id, /^sbx-[0-9a-f]{12}$/);
  assert.deepEqual(lastCall(), {
    service: 'sandboxes',
    method: 'create',
    args: [body, { principal: 'unix' }],
  });
});

test('list filters by label and state', async () => {
  fake.reset();
  await app.inject({ method: 'POST', url: '/v1/sandboxes', payload: { labels: { team: 'a=b' } } });
  const res = await app.inject('/v1/sandboxes?label=team%3Da%3Db&state=running');
  assert.equal((res.json() as { sandboxes: unknown[] }).sandboxes.length, 1);
  assert.deepEqual(lastCall().args, [{ state: 'running', label: { key: 'team', value: 'a=b' } }]);
  const all = await app.inject('/v1/sandboxes');
  assert.equal((all.json() as { sandboxes: unknown[] }).sandboxes.length, 2);
});

test('unknown response fields from a service are not sent', async () => {
  const local = new FakeServices();
  const get = local.services.sandboxes.get.bind(local.services.sandboxes);
  local.services.sandboxes.get = async (id) =>
    ({ ...(await get(id)), secret_host_path: '/var/x' }) as never;
  const a = await buildApp(local.services, { requireAuth: false });
  const res = await a.inject(S);
  assert.equal(res.statusCode, 200);
  assert.doesNotMatch(res.body, /secret_host_path/);
  await a.close();
});

test('buffered exec answers the ExecResult as JSON', async () => {
  fake.reset();
  const res = await app.inject({
    method: 'POST',
    url: `${S}/exec`,
    payload: { argv: ['echo', 'hi'] },
  });
  assert.equal(res.statusCode, 200);
  assert.match(res.headers['content-type'] as string, /^application\/json/);
  const out = res.json() as { stdout: string; exit_code: number };
  assert.equal(Buffer.from(out.stdout, 'base64').toString(), 'hi\n');
  assert.equal(out.exit_code, 0);
});

test('files: binary upload and download are byte-identical, streamed both ways', async () => {
  fake.reset();
  const bytes = Buffer.alloc(3 * 1024 * 1024 + 7);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 31 + 7) & 0xff;
  const put = await app.inject({
    method: 'PUT',
    url: `${S}/files?path=/data/blob.bin&mode=384&parents=true`,
    payload: Readable.from([bytes.subarray(0, 1000), bytes.subarray(1000)]),
    headers: OCTET,
  });
  assert.equal(put.statusCode, 200, put.body);
  assert.deepEqual(put.json(), { size: bytes.length });
  const call = lastCall();
  assert.equal(call.method, 'writeFile');
  assert.deepEqual([call.args[1], call.args[3]], ['/data/blob.bin', { mode: 384, parents: true }]);
  const get = await app.inject(`${S}/files?path=/data/blob.bin`);
  assert.equal(get.headers['content-type'], 'application/octet-stream');
  assert.ok(get.rawPayload.equals(bytes));
});

test('files: an empty upload writes an empty file', async () => {
  fake.reset();
  const put = await app.inject({ method: 'PUT', url: `${S}/files?path=/empty`, headers: OCTET });
  assert.deepEqual(put.json(), { size: 0 });
});

test('files: stat, list, mkdir, remove pass their options', async () => {
  fake.reset();
  const stat = await app.inject(`${S}/files/stat?path=${SEED.file}`);
  assert.equal((stat.json() as { size: number }).size, SEED.fileBytes.length);
  const list = await app.inject(`${S}/files/list?path=/etc`);
  assert.deepEqual(
    (list.json() as { entries: { name: string }[] }).entries.map((e) => e.name),
    ['hello'],
  );
  await app.inject({
    method: 'POST',
    url: `${S}/files/mkdir`,
    payload: { path: '/a/b', parents: true },
  });
  assert.deepEqual(lastCall().args, [SEED.sandbox, '/a/b', { parents: true, mode: undefined }]);
  const rm = await app.inject({
    method: 'DELETE',
    url: `${S}/files?path=${SEED.file}&recursive=true`,
  });
  assert.equal(rm.statusCode, 204);
  assert.deepEqual(lastCall().args, [SEED.sandbox, SEED.file, { recursive: true }]);
  const gone = await app.inject(`${S}/files/stat?path=${SEED.file}`);
  assert.equal(gone.statusCode, 404);
});

test('kill: 204 once all is gone; wait=false answers 202 and says so to the service', async () => {
  fake.reset();
  const later = await app.inject({ method: 'DELETE', url: `${S}?wait=false` });
  assert.equal(later.statusCode, 202);
  assert.equal(later.body, '');
  assert.deepEqual(lastCall().args, [SEED.sandbox, { wait: false }]);
  fake.reset();
  const now = await app.inject({ method: 'DELETE', url: S });
  assert.equal(now.statusCode, 204);
  assert.deepEqual(lastCall().args, [SEED.sandbox, { wait: true }]);
  const bad = await app.inject({ method: 'DELETE', url: `${S}?wait=soon` });
  assert.equal(bad.statusCode, 400);
});

test('logs are text/plain', async () => {
  fake.reset();
  const res = await app.inject(`${S}/logs`);
  assert.match(res.headers['content-type'] as string, /^text\/plain/);
  assert.match(res.body, /forkd-agent: ready/);
});

test('kill defaults to SIGKILL; stdin without eof keeps it open', async () => {
  fake.reset();
  const base = `${S}/execs/${SEED.exec}`;
  await app.inject({
    method: 'POST',
    url: `${base}/stdin`,
    payload: Buffer.from('x'),
    headers: OCTET,
  });
  assert.deepEqual(lastCall().args, [SEED.sandbox, SEED.exec, Buffer.from('x'), false]);
  await app.inject({ method: 'POST', url: `${base}/kill`, payload: {} });
  assert.deepEqual(lastCall().args, [SEED.sandbox, SEED.exec, 'SIGKILL']);
});

test('version and health', async () => {
  assert.deepEqual((await app.inject('/healthz')).json(), { status: 'ok' });
  const v = (await app.inject('/version')).json() as { api: string; accel: string };
  assert.equal(v.api, 'v1');
  assert.equal(v.accel, 'tcg');
});

test('images: create answers 201, a taken name is 409', async () => {
  fake.reset();
  const body = { name: 'tools', from_dir: '/srv/tools' };
  assert.equal(
    (await app.inject({ method: 'POST', url: '/v1/images', payload: body })).statusCode,
    201,
  );
  const again = await app.inject({ method: 'POST', url: '/v1/images', payload: body });
  assert.equal(again.statusCode, 409);
  assert.equal((again.json() as { error: { code: string } }).error.code, 'name_taken');
});
