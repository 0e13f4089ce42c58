/**
 * The error catalog and the error handler: every catalog code has one documented row in
 * docs/errors.md with its status; services' catalog errors keep their code and status;
 * anything unexpected is a generic `internal`; 5xx bodies carry no stack and no host path;
 * `capacity` sets Retry-After; unknown routes are `not_found`.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { ERROR_CATALOG, ForkdError } from '../../src/errors.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';

const fake = new FakeServices();
let app: FastifyInstance;

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
});
after(() => app.close());

const GET_SANDBOX = `/v1/sandboxes/${SEED.sandbox}`;

interface ErrorJson {
  error: { code: string; message: string; details?: Record<string, unknown> };
}

async function failing(err: Error) {
  fake.reset();
  fake.failWith('sandboxes', 'get', err);
  const res = await app.inject(GET_SANDBOX);
  return { res, body: res.json() as ErrorJson };
}

test('every catalog code has exactly one row in docs/errors.md, with its status', () => {
  const rows = [
    ...readFileSync('docs/errors.md', 'utf8').matchAll(/^\|\s*`(\w+)`\s*\|\s*(\d{3})\s*\|/gm),
  ];
  const documented = rows.map(([, code]) => code!);
  assert.equal(new Set(documented).size, documented.length, 'a code is documented twice');
  assert.deepEqual([...documented].sort(), Object.keys(ERROR_CATALOG).sort());
  for (const [, code, status] of rows) {
    const entry = ERROR_CATALOG[code as keyof typeof ERROR_CATALOG];
    assert.equal(entry.status, Number(status), `${code}: the docs say ${status}`);
    assert.ok(Number.isInteger(entry.status) && entry.status >= 400 && entry.status < 600);
  }
});

test('a catalog error keeps its code, status, message and details', async () => {
  const { res, body } = await failing(
    new ForkdError('sandbox_not_found', 'no sandbox: list them with forkd ps', { id: 'x' }),
  );
  assert.equal(res.statusCode, 404);
  assert.match(res.headers['content-type'] as string, /^application\/json/);
  assert.deepEqual(body, {
    error: {
      code: 'sandbox_not_found',
      message: 'no sandbox: list them with forkd ps',
      details: { id: 'x' },
    },
  });
});

test('an unexpected error is a generic 500 without stack or host path', async () => {
  const err = new Error('open /var/lib/forkd/sandboxes/sbx-1/qmp.sock: ENOENT');
  const { res, body } = await failing(err);
  assert.equal(res.statusCode, 500);
  assert.equal(body.error.code, 'internal');
  assert.doesNotMatch(res.body, /\/var\/lib|qmp\.sock|ENOENT|at .*\.js|Error:/);
  assert.deepEqual(Object.keys(body), ['error']);
});

test('a 5xx catalog error is scrubbed of host paths in message and details', async () => {
  const err = new ForkdError(
    'boot_failed',
    'QEMU exited: see /var/lib/forkd/sandboxes/sbx-1/console.log',
    {
      log: '/var/lib/forkd/sandboxes/sbx-1/console.log',
      nested: { argv: ['/usr/bin/qemu-system-x86_64', '-m', '256'] },
      exit_code: 1,
    },
  );
  const { res, body } = await failing(err);
  assert.equal(res.statusCode, 500);
  assert.equal(body.error.code, 'boot_failed');
  assert.doesNotMatch(res.body, /\/var|\/usr/);
  assert.equal(body.error.message, 'QEMU exited: see <path>');
  assert.deepEqual(body.error.details, {
    log: '<path>',
    nested: { argv: ['<path>', '-m', '256'] },
    exit_code: 1,
  });
});

test('an error whose status is not a client error is internal, even with a statusCode', async () => {
  const err = Object.assign(new Error('socket /run/x hung up'), { statusCode: 502 });
  const { res, body } = await failing(err);
  assert.equal(res.statusCode, 500);
  assert.equal(body.error.code, 'internal');
});

test('capacity answers 503 with Retry-After from details, default 1', async () => {
  const cases: [Record<string, unknown> | undefined, string][] = [
    [{ retry_after_s: 7 }, '7'],
    [{ retry_after_s: 0.2 }, '1'],
    [undefined, '1'],
  ];
  for (const [details, header] of cases) {
    const { res, body } = await failing(
      new ForkdError('capacity', 'too many boots; retry', details),
    );
    assert.equal(res.statusCode, 503);
    assert.equal(body.error.code, 'capacity');
    assert.equal(res.headers['retry-after'], header);
  }
});

test('unknown routes and methods are not_found', async () => {
  for (const [method, url] of [
    ['GET', '/nope'],
    ['GET', '/v1/sandboxes/sbx-00000000000a/nope'],
    ['PUT', '/v1/sandboxes'],
    ['POST', '/healthz'],
  ] as const) {
    const res = await app.inject({ method, url });
    assert.equal(res.statusCode, 404, `${method} ${url}`);
    assert.equal((res.json() as ErrorJson).error.code, 'not_found');
  }
});

test('every status the daemon sends for an error is the catalog status of its code', async () => {
  for (const [code, { status }] of Object.entries(ERROR_CATALOG)) {
    const { res, body } = await failing(new ForkdError(code as keyof typeof ERROR_CATALOG, 'x'));
    assert.equal(res.statusCode, status, code);
    assert.equal(body.error.code, code);
  }
});
