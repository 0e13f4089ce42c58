/**
 * POST /v1/builds and /v1/builds/prune (docs/build.md): the query reaches the build service
 * typed, the raw body arrives as the context stream, events stream as NDJSON with the result
 * last; a refusal before the first event is a plain catalog answer; unknown query fields and
 * a daemon without builds are refused. The build service here is a stand-in behind the
 * BuildService interface (the real one is tested end to end in test/e2e/build/).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { ForkdError } from '../../src/errors.js';
import type { BuildQueryT } from '../../src/contract/schemas.js';
import type { BuildEvent, BuildService } from '../../src/services/contracts.js';
import { FakeServices } from '../helpers/fake-services.js';

const seen: { query?: BuildQueryT; body?: string } = {};

const builds: BuildService = {
  async build(query, context: Readable, _caller, onEvent = () => undefined) {
    let body = '';
    for await (const chunk of context) body += (chunk as Buffer).toString();
    Object.assign(seen, { query, body });
    if (body === 'refuse')
      throw new ForkdError('bad_request', 'Dockerfile line 2: unknown instruction X');
    const events: BuildEvent[] = [
      { type: 'step', step: 1, total: 1, line: 2, instruction: 'RUN true' },
      { type: 'output', step: 1, stream: 'stdout', data: 'hi\n' },
      { type: 'step_done', step: 1, status: 'ran', duration_ms: 5, snapshot: 'build-x' },
    ];
    for (const e of events) onEvent(e);
    if (body === 'fail')
      throw new ForkdError('build_failed', 'step 1 (Dockerfile line 2) failed: exit code 3');
    return {
      tag: query.tag ?? null,
      snapshot: 'build-x',
      config: { env: {}, ports: [], labels: {} },
      steps: [],
      duration_ms: 5,
    };
  },
  prune: async () => ['build-old'],
};

let app: FastifyInstance;
let bare: FastifyInstance;
before(async () => {
  app = await buildApp({ ...new FakeServices().services, builds }, { requireAuth: false });
  bare = await buildApp(
    { ...new FakeServices().services, builds: undefined },
    { requireAuth: false },
  );
});
after(async () => {
  await app.close();
  await bare.close();
});

const post = (a: FastifyInstance, url: string, payload: string) =>
  a.inject({
    method: 'POST',
    url,
    payload,
    headers: { 'content-type': 'application/octet-stream' },
  });

const lines = (text: string) =>
  text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

test('a build streams its events, then done with the result; the query and body arrive', async () => {
  const args = encodeURIComponent(JSON.stringify({ V: '2' }));
  const res = await post(
    app,
    `/v1/builds?tag=web&no_cache_from=2&build_args=${args}`,
    'context-bytes',
  );
  assert.equal(res.statusCode, 200);
  assert.match(String(res.headers['content-type']), /application\/x-ndjson/);
  const out = lines(res.body);
  assert.deepEqual(
    out.map((e) => e.type),
    ['step', 'output', 'step_done', 'done'],
  );
  assert.equal((out[3]?.result as { tag: string }).tag, 'web');
  assert.equal(seen.body, 'context-bytes');
  assert.deepEqual({ ...seen.query }, { tag: 'web', no_cache_from: 2, build_args: '{"V":"2"}' });
});

test('a failure after the first event is the last line, with its catalog body', async () => {
  const out = lines((await post(app, '/v1/builds', 'fail')).body);
  const last = out.at(-1) as { type: string; error: { code: string } };
  assert.equal(last.type, 'error');
  assert.equal(last.error.code, 'build_failed');
});

test('a refusal before any event is a plain error answer', async () => {
  const res = await post(app, '/v1/builds', 'refuse');
  assert.equal(res.statusCode, 400);
  assert.match((res.json() as { error: { message: string } }).error.message, /line 2/);
});

test('unknown query fields and bad values are refused', async () => {
  assert.equal((await post(app, '/v1/builds?tagg=x', '')).statusCode, 400);
  assert.equal((await post(app, '/v1/builds?tag=Bad/Tag', '')).statusCode, 400);
  assert.equal((await post(app, '/v1/builds?no_cache_from=0', '')).statusCode, 400);
});

test('prune answers the removed tags; a daemon without builds says so', async () => {
  const res = await app.inject({ method: 'POST', url: '/v1/builds/prune' });
  assert.deepEqual(res.json(), { removed: ['build-old'] });
  const none = await post(bare, '/v1/builds', 'x');
  assert.equal((none.json() as { error: { code: string } }).error.code, 'unsupported');
});
