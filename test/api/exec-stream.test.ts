/**
 * Streaming exec over a real socket (127.0.0.1, ephemeral port): NDJSON lines arrive as the
 * service produces them, not at the end; a failure after the start is a final `error` line
 * without host paths; stdin and kill reach a running exec; a client that hangs up mid-stream
 * gets its exec killed and the daemon keeps serving.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';

const fake = new FakeServices();
let app: FastifyInstance;
let port: number;

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
});
after(() => app.close());

const EXEC = `/v1/sandboxes/${SEED.sandbox}/exec`;

interface Line {
  at: number;
  event: { type: string; data?: string; exec_id?: string; [k: string]: unknown };
}

/** POSTs JSON over the socket; resolves with the response as soon as its headers arrive. */
function post(path: string, body: unknown): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
      },
      resolve,
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

/** Reads NDJSON lines with the time each arrived; stops after `limit` lines if given. */
async function readLines(res: IncomingMessage, limit = Infinity): Promise<Line[]> {
  const lines: Line[] = [];
  let buffered = '';
  for await (const chunk of res) {
    buffered += (chunk as Buffer).toString('utf8');
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      lines.push({ at: Date.now(), event: JSON.parse(buffered.slice(0, nl)) as Line['event'] });
      buffered = buffered.slice(nl + 1);
      if (lines.length >= limit) return lines;
    }
  }
  assert.equal(buffered, '', 'the stream ends with a newline');
  return lines;
}

const text = (l: Line) => Buffer.from(l.event.data ?? '', 'base64').toString('utf8');

async function until(cond: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(10);
  }
}

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
  const outs = lines.slice(1, 5).map((l) => l.at);
  for (let i = 1; i < outs.length; i++) {
    assert.ok(outs[i]! - outs[i - 1]! >= 80, `line ${i} came with the one before it: ${outs}`);
  }
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
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  assert.equal(
    (JSON.parse(Buffer.concat(chunks).toString()) as { error: { code: string } }).error.code,
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
