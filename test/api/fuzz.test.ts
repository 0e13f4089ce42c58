/**
 * Property-based fuzzing of the REST API (fast-check) over the app's own route table: every
 * registered route gets random methods, mangled path segments and query strings, random and
 * malformed bodies of random sizes and content types, and hostile headers, against the real
 * app over fake services. Whatever arrives, the answer is never a 5xx, every error is a
 * catalog code with its catalog status and no host path, and the app keeps serving /healthz.
 * A second part sends broken HTTP over a real TCP socket. Bounded in time: FORKD_FUZZ_SECONDS
 * (default 8) split over the routes; a failure prints the seed to replay it with
 * FORKD_FUZZ_SEED.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { buildApp, routesOf } from '../../src/api/app.js';
import { ERROR_CATALOG, type ErrorCode } from '../../src/errors.js';
import { FakeServices } from '../helpers/fake-services.js';
import { validRequests, type RouteRequest } from '../helpers/route-requests.js';

const SECONDS = Number(process.env.FORKD_FUZZ_SECONDS ?? 8);
const SEED_VALUE = process.env.FORKD_FUZZ_SEED ? Number(process.env.FORKD_FUZZ_SEED) : undefined;
const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'] as const;
const KiB = 1024;

const fake = new FakeServices();
let app: FastifyInstance;
const tally = { routes: 0, cases: 0, statuses: new Map<number, number>() };

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
});
after(async () => {
  await app.close();
  const statuses = [...tally.statuses].sort(([a], [b]) => a - b);
  console.log(
    `REST fuzz: ${tally.routes} routes, ${tally.cases} cases in ${SECONDS} s; statuses ${statuses
      .map(([s, n]) => `${s}×${n}`)
      .join(' ')}`,
  );
});

/** Text that stresses parsers: unicode, NUL, separators, traversal, percent escapes. */
const nasty = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('..', '.', '%2e%2e', '%2F', '%00', '%', '%zz', '\u0000', '🦀', ' ', '?', '#'),
  fc.string({ unit: 'grapheme', maxLength: 20 }),
  fc.integer({ min: 1, max: 4 * KiB }).map((n) => 'a'.repeat(n)),
);

/** Any JSON value, nested a little, sometimes large. */
const json = fc.oneof(
  { weight: 4, arbitrary: fc.jsonValue({ maxDepth: 4 }) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 8 * KiB }).map((n) => 'x'.repeat(n)) },
  { weight: 1, arbitrary: fc.constantFrom(-1, 0, 1e308, -0, 2 ** 53 + 1, '', null, [], {}) },
);

/** The good body with one field replaced, removed, or an extra one added. */
function mutatedBody(body: Record<string, unknown>): fc.Arbitrary<unknown> {
  const keys = Object.keys(body);
  const key = keys.length ? fc.constantFrom(...keys) : fc.constant('x');
  return fc.oneof(
    fc.tuple(key, json).map(([k, v]) => ({ ...body, [k]: v })),
    key.map((k) => Object.fromEntries(Object.entries(body).filter(([x]) => x !== k))),
    fc.tuple(fc.string({ maxLength: 12 }), json).map(([k, v]) => ({ ...body, [k]: v })),
    fc.constant(body),
    json,
  );
}

/** A large body, made only when sent (a counterexample prints its size, not its bytes). */
interface Big {
  bigBytes: number;
}

/** A raw payload: JSON text, random bytes, or a large buffer. */
const rawPayload = fc.oneof(
  fc.uint8Array({ maxLength: 4 * KiB }).map((a) => Buffer.from(a)),
  json.map((v) => JSON.stringify(v) ?? ''),
  fc.constantFrom('{"a":', '{', '[', '"', 'null', '{"__proto__":{"x":1}}', ''),
  fc.integer({ min: 0, max: 3 * KiB * KiB }).map((n): Big => ({ bigBytes: n })),
);

const isBig = (v: unknown): v is Big =>
  typeof v === 'object' && v !== null && 'bigBytes' in v && Object.keys(v).length === 1;

const contentType = fc.option(
  fc.oneof(
    fc.constantFrom(
      'application/json',
      'application/json; charset=utf-16',
      'application/octet-stream',
      'text/plain',
      'multipart/form-data; boundary=x',
      'application/x-www-form-urlencoded',
      'application/json; charset=utf-8; x=',
      ';',
      '',
    ),
    fc.string({ maxLength: 30 }),
  ),
  { nil: undefined },
);

/** Header values must be printable ASCII for inject to send them at all. */
const headerValue = fc
  .string({ unit: 'binary-ascii', maxLength: 200 })
  .map((s) => [...s].filter((c) => c >= ' ' && c < '\u007f').join(''));

const extraHeaders = fc.dictionary(
  fc.constantFrom(
    'authorization',
    'accept',
    'accept-encoding',
    'content-encoding',
    'x-forwarded-for',
    'connection',
    'upgrade',
    'sec-websocket-key',
    'idempotency-key',
    'x-request-id',
  ),
  headerValue,
  { maxKeys: 3 },
);

/** The route's good URL with segments and query parameters mangled. */
function mutatedUrl(r: RouteRequest): fc.Arbitrary<string> {
  const [path, query = ''] = r.url.split('?') as [string, string?];
  const segments = path.split('/');
  const enc = (s: string) => (s.includes('%') ? s : encodeURIComponent(s));
  return fc.oneof(
    fc.constant(r.url),
    fc
      .tuple(fc.integer({ min: 1, max: segments.length - 1 }), nasty)
      .map(([i, s]) => segments.map((x, j) => (j === i ? enc(s) : x)).join('/') + `?${query}`),
    fc.tuple(nasty, nasty).map(([k, v]) => `${path}?${query}&${enc(k)}=${enc(v)}`),
    fc.tuple(nasty).map(([v]) => {
      const p = new URLSearchParams(query);
      for (const k of p.keys()) p.set(k, v);
      return `${path}?${p.toString()}`;
    }),
    nasty.map((s) => `${path}/${enc(s)}`),
    fc.constantFrom(`${path}//`, `${path}/..`, `${path}?${query}&${query}`, `//${path}`),
  );
}

/** A request as generated: its payload may still be a {@link Big} stand-in. */
type FuzzRequest = Omit<InjectOptions, 'payload'> & { payload: unknown };

/** One random request aimed at route `r`. */
function requestFor(r: RouteRequest): fc.Arbitrary<FuzzRequest> {
  const payload: fc.Arbitrary<unknown> = r.body ? mutatedBody(r.body) : rawPayload;
  return fc
    .record({
      method: fc.oneof(
        { weight: 5, arbitrary: fc.constant(r.method) },
        fc.constantFrom(...METHODS),
      ),
      url: mutatedUrl(r),
      payload: fc.option(fc.oneof(payload, rawPayload), { nil: undefined }),
      type: contentType,
      headers: extraHeaders,
    })
    .map(({ method, url, payload, type, headers }) => {
      return {
        method,
        url,
        payload: payload as unknown,
        headers: { ...headers, ...(type === undefined ? {} : { 'content-type': type }) },
      };
    });
}

/** The bytes a generated payload stands for. */
function materialize(payload: unknown): string | Buffer | undefined {
  if (payload === undefined || Buffer.isBuffer(payload) || typeof payload === 'string') {
    return payload;
  }
  if (isBig(payload)) return Buffer.alloc(payload.bigBytes, 0x7b);
  return JSON.stringify(payload);
}

/** The guest's own answers pass through the port route as they are: only ours are checked. */
function fromGuest(route: RouteRequest, status: number, body: string): boolean {
  if (!route.route.endsWith('/*')) return false;
  if (status === 502 && body.includes('"port_unreachable"')) return false;
  return !body.startsWith('{"error":');
}

/** What must hold for every answer. */
function checkAnswer(req: FuzzRequest, status: number, body: string): void {
  const where = `${String(req.method)} ${String(req.url).slice(0, 120)} → ${status} ${body.slice(0, 300)}`;
  tally.statuses.set(status, (tally.statuses.get(status) ?? 0) + 1);
  // port_unreachable is the guest port's failure (the fake guest drops some requests).
  const guestDown = status === 502 && body.includes('"port_unreachable"');
  assert.ok(status < 500 || guestDown, `a 5xx: ${where}`);
  // Through the guest port route the answer is the guest server's own (a 431 for a URL
  // too long for it, say), passed on as it is: only forkd's own errors are catalog JSON.
  const fromGuest = /\/ports\/\d+\//.test(String(req.url)) && !body.startsWith('{"error"');
  if (status < 400 || req.method === 'HEAD' || fromGuest) return;
  const err = (JSON.parse(body) as { error?: { code?: ErrorCode; message?: string } }).error;
  assert.ok(err?.code && ERROR_CATALOG[err.code], `not a catalog error: ${where}`);
  assert.equal(ERROR_CATALOG[err.code].status, status, `status is not the code's: ${where}`);
  assert.doesNotMatch(err.message ?? '', /\bat .*\.js:\d+|\/work\/|node_modules/, where);
}

/** Good requests per registered route; a route without one would go unfuzzed. */
function targets(): RouteRequest[] {
  const good = validRequests();
  const registered = routesOf(app).filter((r) => r.method !== 'HEAD');
  for (const r of registered) {
    assert.ok(
      good.some((g) => g.method === r.method && g.route === r.url),
      `route ${r.method} ${r.url} has no request in validRequests(): add one to fuzz it`,
    );
  }
  return good;
}

test('REST fuzz: random requests on every route get no 5xx, only catalog errors', async () => {
  const routes = targets();
  tally.routes = routes.length;
  const property = (arb: fc.Arbitrary<[RouteRequest, FuzzRequest]>) =>
    fc.asyncProperty(arb, async ([r, req]) => {
      fake.reset();
      tally.cases++;
      const res = await app.inject({ ...req, payload: materialize(req.payload) });
      if (!fromGuest(r, res.statusCode, res.body)) checkAnswer(req, res.statusCode, res.body);
    });
  const withRoute = (r: RouteRequest) =>
    requestFor(r).map((q): [RouteRequest, FuzzRequest] => [r, q]);
  // Every route a few cases whatever the host's speed, then random routes for the time left.
  for (const r of routes) {
    await fc.assert(property(withRoute(r)), { seed: SEED_VALUE, numRuns: 5, endOnFailure: true });
  }
  await fc.assert(property(fc.constantFrom(...routes).chain(withRoute)), {
    seed: SEED_VALUE,
    numRuns: 1_000_000,
    interruptAfterTimeLimit: SECONDS * 1000,
    markInterruptAsFailure: false,
    endOnFailure: true,
  });
  assert.equal((await app.inject('/healthz')).statusCode, 200);
});

/** Sends `raw` on a fresh TCP connection; returns what came back before the close. */
function rawHttp(port: number, raw: Buffer): Promise<string> {
  return new Promise((resolve) => {
    const sock = connect(port, '127.0.0.1');
    let got = '';
    const done = () => resolve(got);
    sock.setTimeout(3000, () => sock.destroy());
    sock.on('data', (d: Buffer) => (got += d.toString('latin1')));
    sock.on('error', done);
    sock.on('close', done);
    sock.write(raw, () => sock.end());
  });
}

const RAW_REQUESTS: fc.Arbitrary<Buffer> = fc.oneof(
  fc.uint8Array({ minLength: 1, maxLength: 2 * KiB }).map((a) => Buffer.from(a)),
  fc
    .tuple(fc.constantFrom(...METHODS, 'BREW', ''), nasty, headerValue)
    .map(([m, p, h]) => Buffer.from(`${m} /${p} HTTP/1.1\r\nHost: x\r\nX: ${h}\r\n\r\n`, 'latin1')),
  fc
    .constantFrom(
      'POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"image":',
      'POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
      'POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n',
      `GET /healthz HTTP/1.1\r\nHost: x\r\nX: ${'a'.repeat(20 * KiB)}\r\n\r\n`,
      'GET /healthz HTTP/9.9\r\n\r\n',
      `GET /${'a'.repeat(100 * KiB)} HTTP/1.1\r\nHost: x\r\n\r\n`,
    )
    .map((s) => Buffer.from(s, 'latin1')),
);

test('REST fuzz: broken HTTP on a real socket gets no 5xx and the server keeps serving', async () => {
  const served = await buildApp(new FakeServices().services, { requireAuth: false });
  try {
    await served.listen({ host: '127.0.0.1', port: 0 });
    const { port } = served.server.address() as AddressInfo;
    let sent = 0;
    await fc.assert(
      fc.asyncProperty(RAW_REQUESTS, async (raw) => {
        sent++;
        const answer = await rawHttp(port, raw);
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
        assert.ok(status < 500, `a 5xx for ${raw.toString('latin1').slice(0, 80)}: ${answer}`);
      }),
      { seed: SEED_VALUE, numRuns: 150, endOnFailure: true },
    );
    tally.cases += sent;
    const health = await rawHttp(port, Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'));
    assert.match(health, /^HTTP\/1\.1 200/);
  } finally {
    await served.close();
  }
});

/** What the fuzzing found, kept as plain cases (docs/reliability.md lists them). */
test('regressions: the guest port route forwards the path as sent, percent-encoding and all', async () => {
  const base = '/v1/sandboxes/sbx-00000000000a/ports/8080';
  for (const rest of ['%E0%B5%AC%F0%93%82%9A%24', 'a%2Fb%3Fc', '%F0%9F%A6%80?q=%E2%82%AC']) {
    const res = await app.inject({ method: 'DELETE', url: `${base}/${rest}` });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.body, `guest DELETE /${rest}`);
  }
});

test('regressions: a request whose body is not forwarded does not corrupt the next one to the guest', async () => {
  const base = '/v1/sandboxes/sbx-00000000000a/ports/8080';
  // A GET with a body, and a DELETE announcing one it never sends: the guest must not wait
  // for those bytes on a connection the next request then uses.
  const first = [
    { method: 'GET' as const, headers: { 'content-type': 'text/plain' }, payload: 'abcdefg' },
    { method: 'DELETE' as const, headers: { 'content-length': '7' } },
  ];
  for (const req of first) {
    const res = await app.inject({ ...req, url: `${base}/first` });
    assert.equal(res.body, `guest ${req.method} /first`);
    const next = await app.inject({ method: 'DELETE', url: `${base}/next` });
    assert.equal(`${next.statusCode} ${next.body}`, '200 guest DELETE /next');
  }
});
