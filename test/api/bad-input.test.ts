/**
 * Bad input over every route, table-driven: unknown fields and parameters, wrong types,
 * ids and names with `/`, `..`, NUL or 10 KB, values out of range, wrong content types and
 * huge bodies. Every case must be a 4xx with a catalog code whose status it is, must not
 * reach a service, and must leave the daemon answering /healthz.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { ERROR_CATALOG, type ErrorCode } from '../../src/errors.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';
import { injectOptions, validRequests, type RouteRequest } from '../helpers/route-requests.js';

interface BadCase {
  name: string;
  request: InjectOptions;
  /** The code this case must get, when only one is right. */
  code?: ErrorCode;
}

const LONG = 'x'.repeat(10 * 1024);
const MiB = 1024 * 1024;
const OCTET = 'application/octet-stream';
const BAD_SEGMENTS = ['a%2Fb', '%2E%2E', '..%2F..%2Fetc', 'sbx-%00', LONG, 'SBX-00000000000A'];

/** Same request, different URL. */
const withUrl = (r: RouteRequest, url: string): InjectOptions => ({ ...injectOptions(r), url });

/** Every id and name in the URL path replaced by each bad segment. */
function badSegments(r: RouteRequest): BadCase[] {
  const [path, query] = r.url.split('?');
  const ids = [
    SEED.sandbox,
    SEED.exec,
    ...(r.route.includes(':name') ? [SEED.image] : []),
    ...(r.route.includes(':tag') ? [SEED.snapshot] : []),
  ];
  return ids
    .filter((id) => path!.split('/').includes(id))
    .flatMap((id) =>
      BAD_SEGMENTS.map((bad) => {
        const url = path!.replace(`/${id}`, `/${bad}`) + (query ? `?${query}` : '');
        return { name: `${id} → ${bad.slice(0, 20)}`, request: withUrl(r, url) };
      }),
    );
}

/** Bad values per query parameter, by what the parameter holds. */
const BAD_QUERY: Record<string, string[]> = {
  path: ['relative', '/a\u0000b', `/${'a'.repeat(5000)}`, ''],
  state: ['zombie', ''],
  label: ['noequals', 'bad key=v', `k=${LONG}`],
  eof: ['maybe', '1', ''],
  parents: ['yes', '0'],
  recursive: ['TRUE'],
  mode: ['-1', '4096', 'abc', '1.5', '0x1ff'],
  force: ['yes', '1', ''],
  cascade: ['yes', '1', ''],
  tag: ['Upper', 'a/b', '..', '', LONG],
};

function badQueries(r: RouteRequest): BadCase[] {
  const [path, query = ''] = r.url.split('?');
  const params = new URLSearchParams(query);
  const url = (p: URLSearchParams) => `${path}?${p.toString()}`;
  const cases: BadCase[] = [
    {
      name: 'unknown query parameter',
      request: withUrl(r, url(new URLSearchParams([...params, ['bogus', '1']]))),
    },
  ];
  for (const key of params.keys()) {
    const repeated = new URLSearchParams([...params, [key, params.get(key)!]]);
    cases.push({ name: `${key} given twice`, request: withUrl(r, url(repeated)) });
    const without = new URLSearchParams(params);
    without.delete(key);
    if (key === 'path') cases.push({ name: 'path missing', request: withUrl(r, url(without)) });
    for (const bad of BAD_QUERY[key] ?? []) {
      const p = new URLSearchParams(params);
      p.set(key, bad);
      cases.push({ name: `${key}=${bad.slice(0, 20)}`, request: withUrl(r, url(p)) });
    }
  }
  return cases;
}

/** A value of another JSON type than `v`. */
function wrongType(v: unknown): unknown {
  if (typeof v === 'string') return 12345;
  if (typeof v === 'number') return String(v);
  if (typeof v === 'boolean') return 'true';
  if (Array.isArray(v)) return 'not-an-array';
  return ['not-an-object'];
}

function jsonCase(r: RouteRequest, name: string, payload: unknown): BadCase {
  return { name, request: { method: r.method, url: r.url, payload: payload as string } };
}

function badJsonBodies(r: RouteRequest): BadCase[] {
  const body = r.body!;
  const raw = (
    name: string,
    payload: string | Buffer,
    type = 'application/json',
    code?: ErrorCode,
  ) => ({
    name,
    request: { method: r.method, url: r.url, payload, headers: { 'content-type': type } },
    code,
  });
  return [
    jsonCase(r, 'unknown field', { ...body, bogus: 1 }),
    jsonCase(r, 'unknown nested __proto__', JSON.parse(`{"__proto__": {"x": 1}}`)),
    ...Object.keys(body).map((k) =>
      jsonCase(r, `${k}: wrong type`, { ...body, [k]: wrongType(body[k]) }),
    ),
    ...Object.keys(body).map((k) => jsonCase(r, `${k}: null`, { ...body, [k]: null })),
    raw('array body', '[]'),
    raw('string body', '"x"'),
    raw('number body', '42'),
    raw('malformed JSON', '{"a":'),
    raw('empty JSON body', ''),
    raw(
      '2 MiB JSON body',
      JSON.stringify({ ...body, pad: 'x'.repeat(2 * MiB) }),
      undefined,
      'payload_too_large',
    ),
    raw('octet-stream to a JSON route', Buffer.from('{}'), OCTET, 'unsupported_media_type'),
    raw('text/plain body', 'hello', 'text/plain', 'unsupported_media_type'),
  ];
}

function badRawBodies(r: RouteRequest): BadCase[] {
  const req = (name: string, payload: string | Buffer, type: string, code: ErrorCode) => ({
    name,
    request: { method: r.method, url: r.url, payload, headers: { 'content-type': type } },
    code,
  });
  const cases = [
    req('JSON to a raw route', '{"a":1}', 'application/json', 'unsupported_media_type'),
    req('text/plain to a raw route', 'hello', 'text/plain', 'unsupported_media_type'),
  ];
  if (r.route.endsWith('/stdin')) {
    cases.push(req('2 MiB stdin chunk', Buffer.alloc(2 * MiB), OCTET, 'payload_too_large'));
  }
  return cases;
}

/** A JSON body on a route that takes none. */
function unexpectedBody(r: RouteRequest): BadCase[] {
  if (r.body || r.raw || r.method === 'GET') return [];
  return [jsonCase(r, 'body on a route without one', { a: 1 })];
}

/** Values out of range or of the wrong shape, route by route. */
const RANGES: Record<string, Record<string, unknown>[]> = {
  'POST /v1/sandboxes': [
    { memory_mib: 63 },
    { memory_mib: 65537 },
    { memory_mib: 1e12 },
    { memory_mib: 256.5 },
    { cpus: 0 },
    { cpus: 65 },
    { cpus: -1 },
    { timeout_s: 0 },
    { timeout_s: 7 * 24 * 3600 + 1 },
    { image: 'a/b' },
    { image: '..' },
    { image: 'a\u0000b' },
    { image: LONG },
    { image: 'Upper' },
    { labels: { 'bad key': 'v' } },
    { labels: { '../x': 'v' } },
    { labels: { k: 'v'.repeat(300) } },
    { labels: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v'])) },
    { labels: { k: 1 } },
    { env: { 'A=B': 'x' } },
    { env: { '1A': 'x' } },
    { env: { 'A\u0000': 'x' } },
    { env: { A: 'x'.repeat(40000) } },
    // a fork names a snapshot and takes its image, memory and cpus from it
    { snapshot: SEED.snapshot },
    { snapshot: 'a/b' },
    { snapshot: 'Upper' },
    { snapshot: LONG },
    { n: 2 },
    { all_or_nothing: true },
    { n: 0 },
    { n: 101 },
    { n: 1.5 },
  ],
  'POST /v1/snapshots': [
    { tag: 'Upper' },
    { tag: 'a/b' },
    { tag: '..' },
    { tag: 'a\u0000b' },
    { tag: LONG },
    { tag: undefined },
    { image: '..' },
    { memory_mib: 63 },
    { cpus: 65 },
    { warm: [''] },
    { warm: [1] },
    { warm: Array.from({ length: 65 }, () => 'true') },
    { start: ['x'.repeat(65537)] },
    { wait_for: '' },
    { wait_port: 8080 },
    { wait_for: undefined, wait_port: 0 },
    { wait_for: undefined, wait_port: 65536 },
    { wait_timeout_s: 0 },
    { wait_timeout_s: 3601 },
    { labels: { 'bad key': 'v' } },
    { env: { '1A': 'x' } },
  ],
  'PUT /v1/snapshots/:tag/pool': [{ size: -1 }, { size: 65 }, { size: 1.5 }, { size: undefined }],
  'POST /v1/sandboxes/:id/branch': [
    { tag: 'Upper' },
    { tag: 'a/b' },
    { tag: '..' },
    { tag: LONG },
    { fork: -1 },
    { fork: 101 },
    { fork: 1.5 },
    { labels: { 'bad key': 'v' } },
    { mode: 'fast' },
    { mode: 'LIVE' },
    // children need the finished snapshot: no_wait cannot fork
    { no_wait: true },
  ],
  'POST /v1/snapshots/:tag/compact': [
    { to: 'Upper' },
    { to: 'a/b' },
    { to: LONG },
    { to: undefined },
    { to: SEED.snapshot },
  ],
  'PATCH /v1/sandboxes/:id': [{ timeout_s: 0 }, { timeout_s: 1e9 }, { timeout_s: undefined }],
  'POST /v1/sandboxes/:id/pause': [{ tier: 'running' }, { tier: 'frozen' }, { tier: 1 }],
  'POST /v1/sandboxes/:id/exec': [
    { argv: [] },
    { argv: [1] },
    { argv: ['x'.repeat(131073)] },
    { cwd: 'relative' },
    { cwd: '/a\u0000b' },
    { cwd: `/${LONG}` },
    { user: '../root' },
    { user: 'a/b' },
    { timeout_ms: 0 },
    { stdin: 'not base64!' },
    { keep_stdin_open: true },
    { env: { 'BAD-NAME': 'x' } },
  ],
  'POST /v1/sandboxes/:id/execs/:exec_id/kill': [{ signal: 'SIGFOO' }, { signal: 9 }],
  'POST /v1/sandboxes/:id/files/mkdir': [{ path: 'rel' }, { mode: 4096 }, { path: '/a\u0000' }],
  'POST /v1/cache/prune': [{ all: 'yes' }],
  'POST /v1/images/:name/boot-snapshot': [{ memory_mib: 1 }, { cpus: 0 }, { network: 'bridge' }],
  'POST /v1/images': [
    { name: 'a/b' },
    { name: '..' },
    { name: 'x\u0000' },
    { name: LONG },
    { from_dir: 'relative' },
    { from_dir: '/a\u0000b' },
    { size_mib: 1 },
  ],
};

function outOfRange(r: RouteRequest): BadCase[] {
  return (RANGES[`${r.method} ${r.route}`] ?? []).map((change) =>
    jsonCase(r, `out of range ${JSON.stringify(change).slice(0, 40)}`, { ...r.body, ...change }),
  );
}

function casesFor(r: RouteRequest): BadCase[] {
  // The route to a guest port passes its query and body through: only its segments are ours.
  if (r.route.endsWith('/*')) return badSegments(r);
  return [
    ...badSegments(r),
    ...badQueries(r),
    ...(r.body ? badJsonBodies(r) : []),
    ...(r.raw ? badRawBodies(r) : []),
    ...unexpectedBody(r),
    ...outOfRange(r),
  ];
}

const fake = new FakeServices();
let app: FastifyInstance;
let total = 0;

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
});
after(async () => {
  await app.close();
  assert.ok(total > 300, `only ${total} bad-input cases`);
});

test('every route of the contract is in the table', () => {
  assert.equal(validRequests().length, 69);
});

for (const r of validRequests()) {
  test(`bad input: ${r.method} ${r.route}`, async () => {
    const cases = casesFor(r);
    assert.ok(cases.length > 0);
    total += cases.length;
    for (const c of cases) {
      fake.reset();
      const res = await app.inject(c.request);
      const where = `${c.name}: ${res.statusCode} ${res.body.slice(0, 200)}`;
      assert.ok(res.statusCode >= 400 && res.statusCode < 500, where);
      const code = (res.json() as { error: { code: ErrorCode } }).error.code;
      assert.equal(ERROR_CATALOG[code]?.status, res.statusCode, where);
      if (c.code) assert.equal(code, c.code, where);
      assert.deepEqual(fake.serviceCalls(), [], `${where}: a service was called`);
      assert.equal((await app.inject('/healthz')).statusCode, 200, where);
    }
  });
}

test('the good request of every route succeeds (so the cases above are meaningful)', async () => {
  for (const r of validRequests()) {
    fake.reset();
    const res = await app.inject(injectOptions(r));
    assert.equal(res.statusCode, r.status, `${r.method} ${r.url}: ${res.body.slice(0, 200)}`);
  }
});

test('validation errors name the field', async () => {
  const create = validRequests().find((r) => r.route === '/v1/sandboxes' && r.method === 'POST')!;
  const cases: [Record<string, unknown>, string][] = [
    [{ bogus: 1 }, 'body.bogus'],
    [{ cpus: 65 }, 'body.cpus'],
    [{ labels: { 'bad key': 'v' } }, 'body.labels.bad key'],
  ];
  for (const [change, field] of cases) {
    const res = await app.inject({
      method: 'POST',
      url: create.url,
      payload: { ...create.body, ...change },
    });
    const err = (res.json() as { error: { code: string; details: { field: string } } }).error;
    assert.equal(err.code, 'bad_request');
    assert.equal(err.details.field, field);
  }
  const q = await app.inject(`/v1/sandboxes/${SEED.sandbox}/files?path=rel`);
  assert.equal(
    (q.json() as { error: { details: { field: string } } }).error.details.field,
    'query.path',
  );
});
