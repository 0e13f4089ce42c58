/**
 * Eval and code contexts at the REST layer over the fake services: the Execution answer,
 * NDJSON events as the code runs, the catalog errors (unknown sandbox, stopped sandbox,
 * unknown context, a taken name, bad names and fields) before any service is reached
 * where the schema can tell, and the fan-out answer.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';
import { SEED_CONTEXT } from '../helpers/fake-contexts.js';
import { Sandbox } from '@forkd/sdk';
import { listenLocal, post as postTo, readLines } from './socket-client.js';

const fake = new FakeServices();
let app: FastifyInstance;
let port: number;

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
  port = await listenLocal(app);
});
after(() => app.close());

const S = `/v1/sandboxes/${SEED.sandbox}`;
const inject = (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown) =>
  app.inject({ method, url, ...(payload === undefined ? {} : { payload: payload as object }) });
const code = (res: { json(): unknown }) => (res.json() as { error: { code: string } }).error.code;

test('eval answers an Execution: main result, logs, the code’s error', async () => {
  fake.reset();
  const ok = await inject('POST', `${S}/eval`, { code: '1 + 1' });
  assert.equal(ok.statusCode, 200);
  assert.deepEqual(ok.json(), {
    results: [{ is_main_result: true, data: { 'text/plain': '1 + 1' } }],
    logs: { stdout: [], stderr: [] },
    error: null,
    text: '1 + 1',
    execution_count: 1,
    duration_ms: 1,
  });
  const printed = (await inject('POST', `${S}/eval`, { code: 'print(hi)' })).json();
  assert.deepEqual((printed as { logs: unknown }).logs, { stdout: ['hi\n'], stderr: [] });
  const raised = await inject('POST', `${S}/eval`, { code: 'raise ValueError' });
  assert.equal(raised.statusCode, 200, 'an exception in the code is a result, not an HTTP error');
  assert.equal((raised.json() as { error: { name: string } }).error.name, 'ValueError');
});

test('SDK: sandbox.eval, and runCode (its E2B name) as an alias of it', async () => {
  fake.reset();
  const sbx = await Sandbox.connect(SEED.sandbox, { url: `http://127.0.0.1:${port}` });
  assert.equal((await sbx.eval('6 * 7')).text, '6 * 7');
  const alias = await sbx.runCode('print(hi)');
  assert.deepEqual([alias.logs.stdout, alias.executionCount], [['hi\n'], 2]);
});

test('stream:true answers NDJSON events ending with `end`', async () => {
  fake.reset();
  const res = await postTo(port, `${S}/eval`, { code: 'print(x)', stream: true });
  assert.equal(res.headers['content-type'], 'application/x-ndjson');
  const lines = await readLines(res);
  assert.deepEqual(
    lines.map((l) => l.event),
    [
      { type: 'stdout', text: 'x\n' },
      { type: 'end', execution_count: 1, duration_ms: 1 },
    ],
  );
});

test('errors: unknown sandbox, stopped sandbox, unknown context, taken name', async () => {
  fake.reset();
  const missing = await inject('POST', '/v1/sandboxes/sbx-0000000000ff/eval', { code: '1' });
  assert.equal(missing.statusCode, 404);
  assert.equal(code(missing), 'sandbox_not_found');
  const noCtx = await inject('POST', `${S}/eval`, { code: '1', context: 'nope' });
  assert.equal(noCtx.statusCode, 404);
  assert.equal(code(noCtx), 'context_not_found');
  for (const [method, url] of [
    ['POST', `${S}/contexts/nope/restart`],
    ['POST', `${S}/contexts/nope/interrupt`],
    ['DELETE', `${S}/contexts/nope`],
  ] as const) {
    assert.equal(code(await inject(method, url)), 'context_not_found', `${method} ${url}`);
  }
  const taken = await inject('POST', `${S}/contexts`, { name: SEED_CONTEXT });
  assert.equal(taken.statusCode, 409);
  assert.equal(code(taken), 'name_taken');
  await inject('DELETE', S);
  const stopped = await inject('POST', `${S}/eval`, { code: '1' });
  assert.equal(stopped.statusCode, 409);
  assert.equal(code(stopped), 'sandbox_not_running');
});

test('bad input is refused before any service is reached', async () => {
  fake.reset();
  const cases: [string, unknown][] = [
    [`${S}/eval`, {}],
    [`${S}/eval`, { code: 1 }],
    [`${S}/eval`, { code: '1', context: '../x' }],
    [`${S}/eval`, { code: '1', timeout_ms: 0 }],
    [`${S}/eval`, { code: '1', extra: true }],
    [`${S}/contexts`, { language: 'ruby' }],
    [`${S}/contexts`, { cwd: 'relative' }],
    [`${S}/eval-fork`, { variants: [] }],
    [`${S}/eval-fork`, { variants: Array.from({ length: 101 }, () => '1') }],
  ];
  for (const [url, body] of cases) {
    const res = await inject('POST', url, body);
    assert.equal(res.statusCode, 400, `${url} ${JSON.stringify(body)}: ${res.body}`);
    assert.equal(code(res), 'bad_request');
  }
  assert.deepEqual(fake.serviceCalls(), []);
});

test('contexts are created with their own cwd and env, listed, removed', async () => {
  fake.reset();
  const made = await inject('POST', `${S}/contexts`, {
    name: 'data',
    cwd: '/data',
    env: { A: '1' },
  });
  assert.equal(made.statusCode, 201);
  assert.deepEqual((made.json() as { cwd: string; env: unknown }).cwd, '/data');
  const names = (await inject('GET', `${S}/contexts`)).json() as { name: string }[];
  assert.deepEqual(
    names.map((c) => c.name),
    [SEED_CONTEXT, 'data'],
  );
  assert.equal((await inject('DELETE', `${S}/contexts/data`)).statusCode, 204);
});

test('eval-fork answers one result per variant, in order', async () => {
  fake.reset();
  const res = await inject('POST', `${S}/eval-fork`, { variants: ['a', 'b', 'c'] });
  assert.equal(res.statusCode, 200);
  const body = res.json() as { results: { index: number; execution: { text: string } }[] };
  assert.deepEqual(
    body.results.map((r) => [r.index, r.execution.text]),
    [
      [0, 'a'],
      [1, 'b'],
      [2, 'c'],
    ],
  );
});
