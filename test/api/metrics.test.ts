/**
 * Metrics: GET /metrics is Prometheus text with sandboxes by state, boots, execs, request
 * latency by route pattern, errors by code and the process defaults; each app has its own
 * registry, so two apps in one process do not collide.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildApp } from '../../src/api/app.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';

test('the metrics text has every forkd metric and counts what happened', async () => {
  const fake = new FakeServices();
  const app = await buildApp(fake.services, { requireAuth: false });
  const other = await buildApp(new FakeServices().services, { requireAuth: false });
  await app.inject({ method: 'POST', url: '/v1/sandboxes', payload: {} });
  await app.inject({
    method: 'POST',
    url: `/v1/sandboxes/${SEED.sandbox}/exec`,
    payload: { argv: ['echo'] },
  });
  await app.inject('/v1/sandboxes/sbx-0000000000ff');
  const res = await app.inject('/metrics');
  assert.equal(res.statusCode, 200);
  assert.match(res.headers['content-type'] as string, /^text\/plain/);
  const text = res.body;
  for (const line of [
    'forkd_sandboxes{state="running"} 2',
    'forkd_sandboxes{state="dead"} 0',
    'forkd_boots_total 1',
    'forkd_execs_total 1',
    'forkd_errors_total{code="sandbox_not_found"} 1',
  ]) {
    assert.ok(text.includes(line), line);
  }
  assert.match(
    text,
    /forkd_http_request_duration_seconds_bucket\{le="[^"]+",method="POST",route="\/v1\/sandboxes\/:id\/exec",status="200"\} 1/,
  );
  assert.match(text, /^process_cpu_user_seconds_total /m);
  assert.match((await other.inject('/metrics')).body, /forkd_boots_total 0/);
  await Promise.all([app.close(), other.close()]);
});
