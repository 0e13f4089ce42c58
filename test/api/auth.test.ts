/**
 * Auth: with tokens configured, no token or a wrong one gets 401 `unauthorized` on every
 * route but /healthz (before validation, so nothing reaches a service); the right token
 * passes and becomes the audit principal. TCP without tokens is refused up front.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { assertListenSafe, buildApp } from '../../src/api/app.js';
import { isForkdError } from '../../src/errors.js';
import { FakeServices } from '../helpers/fake-services.js';
import { injectOptions, validRequests } from '../helpers/route-requests.js';

const TOKEN = 'tok-0123456789abcdef';
const fake = new FakeServices();
let app: FastifyInstance;

before(async () => {
  app = await buildApp(fake.services, {
    requireAuth: true,
    tokens: new Map([
      [TOKEN, 'ci'],
      ['another-token-of-a-different-length', 'ops'],
    ]),
  });
});
after(() => app.close());

const guarded = validRequests().filter((r) => r.route !== '/healthz');
const BAD_HEADERS: [string, Record<string, string>][] = [
  ['no token', {}],
  ['wrong token', { authorization: 'Bearer tok-0123456789abcdeX' }],
  ['token prefix', { authorization: `Bearer ${TOKEN.slice(0, -1)}` }],
  ['token plus suffix', { authorization: `Bearer ${TOKEN}x` }],
  ['empty bearer', { authorization: 'Bearer ' }],
  ['basic scheme', { authorization: `Basic ${TOKEN}` }],
  ['bare token', { authorization: TOKEN }],
];

for (const r of guarded) {
  test(`401 without the right token: ${r.method} ${r.route}`, async () => {
    for (const [name, headers] of BAD_HEADERS) {
      fake.reset();
      const res = await app.inject(injectOptions(r, headers));
      assert.equal(res.statusCode, 401, `${name}: ${res.body}`);
      assert.equal((res.json() as { error: { code: string } }).error.code, 'unauthorized');
      assert.deepEqual(fake.serviceCalls(), [], name);
    }
  });
}

test('the right token passes on every route', async () => {
  for (const r of guarded) {
    fake.reset();
    const res = await app.inject(injectOptions(r, { authorization: `Bearer ${TOKEN}` }));
    assert.equal(res.statusCode, r.status, `${r.method} ${r.url}: ${res.body.slice(0, 200)}`);
  }
  const lower = await app.inject({
    url: '/version',
    headers: { authorization: `bearer ${TOKEN}` },
  });
  assert.equal(lower.statusCode, 200, 'the scheme is case-insensitive');
});

test('/healthz needs no token', async () => {
  assert.equal((await app.inject('/healthz')).statusCode, 200);
  const wrong = await app.inject({ url: '/healthz', headers: { authorization: 'Bearer nope' } });
  assert.equal(wrong.statusCode, 200);
});

test('auth comes before validation and routing', async () => {
  const bad = await app.inject({ method: 'POST', url: '/v1/sandboxes', payload: { bogus: 1 } });
  assert.equal(bad.statusCode, 401);
  const unknown = await app.inject('/v1/nothing-here');
  assert.equal(unknown.statusCode, 401, 'unknown routes are not probed without a token');
});

test('the token id is the audit principal; a refused mutation is audited anonymously', async () => {
  fake.reset();
  const ok = { authorization: 'Bearer another-token-of-a-different-length' };
  await app.inject({ method: 'DELETE', url: '/v1/images/base', headers: ok });
  await app.inject({ method: 'DELETE', url: '/v1/images/base' });
  assert.deepEqual(
    fake.audit.map((e) => [e.principal, e.status, e.code]),
    [
      ['ops', 204, null],
      ['anonymous', 401, 'unauthorized'],
    ],
  );
});

test('without tokens the principal is unix', async () => {
  const local = new FakeServices();
  const unixApp = await buildApp(local.services, { requireAuth: false });
  await unixApp.inject({ method: 'DELETE', url: '/v1/images/base' });
  assert.equal(local.audit[0]?.principal, 'unix');
  await unixApp.close();
});

test('TCP without a token is refused at start', async () => {
  const refused = (e: unknown) => isForkdError(e) && /token/.test(e.message);
  assert.throws(() => assertListenSafe({ requireAuth: true }), refused);
  assert.throws(() => assertListenSafe({ requireAuth: true, tokens: new Map() }), refused);
  assert.doesNotThrow(() =>
    assertListenSafe({ requireAuth: true, tokens: new Map([['t', 'id']]) }),
  );
  assert.doesNotThrow(() => assertListenSafe({ requireAuth: false }));
  await assert.rejects(buildApp(new FakeServices().services, { requireAuth: true }), refused);
});
