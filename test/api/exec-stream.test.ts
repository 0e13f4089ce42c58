/**
 * Streaming exec over a real socket (127.0.0.1, ephemeral port): NDJSON lines arrive as the
 * service produces them, not at the end; a failure after the start is a final `error` line
 * without host paths; stdin and kill reach a running exec; a client that hangs up mid-stream
 * gets its exec killed and the daemon keeps serving.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';
import {
  assertSpread,
  listenLocal,
  post as postTo,
  readLines,
  readText,
  until,
  type Line,
} from './socket-client.js';

const fake = new FakeServices();
let app: FastifyInstance;
let port: number;

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
  port = await listenLocal(app);
});
after(() => app.close());

const EXEC = `/v1/sandboxes/${SEED.sandbox}/exec`;

const post = (path: string, body: unknown) => postTo(port, path, body);

const text = (l: Line) => Buffer.from(l.event.data ?? '', 'base64').toString('utf8');

test('lines arrive as they are produced', async () => {
  fake.reset();
  fake.streamDelayMs = 150;
  const res = await post(EXEC, { argv: ['lines', 'one', 'two', 'three', 'four'], stream: true });
  assert.equal(res.statusCode, 200);
  assert.equal(res.headers['content-type'], 'application/x-ndjson');
  const lines = await readLines(res);
  assert.deepEqual(
    lines.map((l) => l.event.type),
    ['started', 'stdout', 'stdout', 'stdout', 'stdout', 'exit'],
  );
  assert.match(lines[0]!.event.exec_id!, /^ex-[0-9a-f]{12}$/);
  assert.equal(lines[0]!.event.pid, 100);
  assert.deepEqual(lines.slice(1, 5).map(text), ['one\n', 'two\n', 'three\n', 'four\n']);
  assertSpread(
    lines.slice(1, 5).map((l) => l.at),
    80,
  );
  assert.deepEqual(lines[5]!.event, {
    type: 'exit',
    exit_code: 0,
    signal: null,
    timed_out: false,
    duration_ms: 1,
  });
});

test('a failure after the start is a final error line, scrubbed', async () => {
  fake.reset();
  fake.streamDelayMs = 5;
  const res = await post(EXEC, { argv: ['crash'], stream: true });
  const lines = await readLines(res);
  assert.deepEqual(
    lines.map((l) => l.event.type),
    ['started', 'stdout', 'error'],
  );
  const last = lines[2]!.event as unknown as { error: { code: string; message: string } };
  assert.equal(last.error.code, 'internal');
  assert.doesNotMatch(JSON.stringify(last), /\/var|agent\.sock/);
  await until(() => fake.audit.length > 0);
  assert.equal(fake.audit[0]!.code, 'internal', 'the audit entry says the exec failed');
});

test('a failure before the start is an ordinary error answer', async () => {
  fake.reset();
  const res = await post(EXEC, { argv: ['missing'], stream: true });
  assert.equal(res.statusCode, 422);
  assert.match(res.headers['content-type'] as string, /^application\/json/);
  assert.equal(
    (JSON.parse(await readText(res)) as { error: { code: string } }).error.code,
    'command_not_found',
  );
});

test('stdin and kill reach a running streaming exec', async () => {
  fake.reset();
  fake.streamDelayMs = 20;
  const res = await post(EXEC, { argv: ['sleep'], stream: true, keep_stdin_open: true });
  const reading = readLines(res);
  await until(() => fake.execs.size > 1);
  const execId = [...fake.execs.keys()].find((k) => k !== SEED.exec)!;
  const base = `/v1/sandboxes/${SEED.sandbox}/execs/${execId}`;
  const stdin = await app.inject({
    method: 'POST',
    url: `${base}/stdin?eof=true`,
    payload: Buffer.from([0, 1, 2, 0xff]),
    headers: { 'content-type': 'application/octet-stream' },
  });
  assert.equal(stdin.statusCode, 204);
  assert.deepEqual(fake.execs.get(execId)!.stdin, [Buffer.from([0, 1, 2, 0xff])]);
  assert.equal(fake.execs.get(execId)!.eof, true);
  const kill = await app.inject({ method: 'POST', url: `${base}/kill`, payload: {} });
  assert.equal(kill.statusCode, 204);
  const lines = await reading;
  assert.deepEqual(lines.at(-1)!.event, {
    type: 'exit',
    exit_code: null,
    signal: 'SIGKILL',
    timed_out: false,
    duration_ms: 1,
  });
});

test('a client hanging up on a command that prints nothing kills it too', async () => {
  fake.reset();
  fake.streamDelayMs = 5;
  const res = await post(EXEC, { argv: ['silent'], stream: true });
  await readLines(res, 1);
  res.destroy();
  await until(() => [...fake.execs.values()].some((e) => e.killed === 'SIGKILL'));
});

test('a client hanging up mid-stream kills the exec; the daemon keeps serving', async () => {
  fake.reset();
  fake.streamDelayMs = 5;
  const res = await post(EXEC, { argv: ['sleep'], stream: true });
  await readLines(res, 3);
  res.destroy();
  await until(() => [...fake.execs.values()].some((e) => e.killed === 'SIGKILL'));
  assert.equal((await app.inject('/healthz')).statusCode, 200);
  const again = await post(EXEC, { argv: ['lines', 'still', 'here'], stream: true });
  assert.deepEqual((await readLines(again)).slice(1, 3).map(text), ['still\n', 'here\n']);
});
