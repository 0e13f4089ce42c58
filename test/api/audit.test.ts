/**
 * Audit: every mutating request (POST, PUT, PATCH, DELETE) — answered or refused — is one
 * entry with principal, method, route pattern, target, status, code and duration; reads
 * are not audited.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';
import { injectOptions, validRequests, type RouteRequest } from '../helpers/route-requests.js';

const fake = new FakeServices();
let app: FastifyInstance;

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
});
after(() => app.close());

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** What a good request of the table acted on: named in its URL, its body or its answer. */
function expectedTarget(r: RouteRequest, answer: () => unknown): string | null {
  if (r.route === '/v1/images') return 'tools';
  if (r.route === '/v1/images/pull') return 'app';
  if (r.route === '/v1/images/import') return 'imported';
  if (['/v1/images/prune', '/v1/cache/prune', '/v1/builds/prune'].includes(r.route)) return null;
  if (r.route === '/v1/builds') return 'built-1';
  if (r.route.startsWith('/v1/logins')) return '127.0.0.1:5000';
  if (r.route.startsWith('/v1/images/')) return SEED.image;
  if (r.route === '/v1/snapshots') return 'fresh';
  if (r.route === '/v1/snapshots/unpack') return 'unpacked-1';
  if (r.route === '/v1/snapshots/pull') return 'pulled-1';
  if (r.route.startsWith('/v1/snapshots/')) return SEED.snapshot;
  if (r.route === '/v1/sandboxes') return (answer() as { id: string }).id;
  return SEED.sandbox;
}

test('one entry per mutation, none for reads', async () => {
  for (const r of validRequests()) {
    fake.reset();
    const res = await app.inject(injectOptions(r));
    if (!MUTATING.has(r.method)) {
      assert.deepEqual(fake.audit, [], `${r.method} ${r.route} is a read`);
      continue;
    }
    assert.equal(fake.audit.length, 1, `${r.method} ${r.route}`);
    const e = fake.audit[0]!;
    assert.equal(e.principal, 'unix');
    assert.equal(e.method, r.method);
    assert.equal(e.route, r.route);
    assert.equal(e.status, res.statusCode);
    assert.equal(e.code, null);
    assert.ok(e.duration_ms >= 0);
    assert.ok(!Number.isNaN(Date.parse(e.at)));
    assert.equal(e.target, expectedTarget(r, res.json.bind(res)), `${r.method} ${r.route}`);
  }
});

test('refused and failed mutations are audited with their code', async () => {
  fake.reset();
  await app.inject({ method: 'POST', url: '/v1/sandboxes', payload: { bogus: 1 } });
  await app.inject({ method: 'DELETE', url: '/v1/sandboxes/sbx-0000000000ff' });
  await app.inject({ method: 'POST', url: '/v1/nothing' });
  assert.deepEqual(
    fake.audit.map((e) => [e.method, e.route, e.target, e.status, e.code]),
    [
      ['POST', '/v1/sandboxes', null, 400, 'bad_request'],
      ['DELETE', '/v1/sandboxes/:id', 'sbx-0000000000ff', 404, 'sandbox_not_found'],
      ['POST', 'unmatched', null, 404, 'not_found'],
    ],
  );
});

test('a failing audit store does not fail the request', async () => {
  const local = new FakeServices();
  local.services.audit.record = () => {
    throw new Error('disk full');
  };
  const a = await buildApp(local.services, { requireAuth: false });
  const res = await a.inject({ method: 'DELETE', url: `/v1/images/${SEED.image}` });
  assert.equal(res.statusCode, 204);
  await a.close();
});
