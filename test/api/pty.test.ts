/**
 * Terminal sessions over the WebSocket route, through the SDK and the CLI, against the fake
 * services (fake-pty.ts echoes input; `exit N` ends a session): the frame protocol of
 * docs/api.md, reattach with `since`, and the refusals that must come before the upgrade
 * (bad size, unknown sandbox, an agent too old for terminals, a missing token).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  BadRequestError,
  PtyDetachedError,
  PtySessionNotFoundError,
  Sandbox,
  SandboxNotFoundError,
  UnsupportedError,
  type PtyHandle,
} from '@forkd/sdk';
import WebSocket from 'ws';
import { buildApp } from '../../src/api/app.js';
import { PTY_SLOW_CLOSE } from '../../src/api/routes/pty.js';
import { ForkdError } from '../../src/errors.js';
import { cliOverFakes, out } from '../helpers/fake-cli.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';
import { forkd as runCli } from '../helpers/cli.js';

const cli = cliOverFakes('forkd-pty-api-');
const url = () => cli.env.FORKD_URL as string;

/** Output collected as text, and a wait for a piece of it (bounded). */
function collector() {
  let text = '';
  return {
    onData: (d: Uint8Array) => void (text += Buffer.from(d).toString('utf8')),
    get text() {
      return text;
    },
    async until(piece: string, ms = 5000): Promise<void> {
      const deadline = Date.now() + ms;
      while (!text.includes(piece)) {
        if (Date.now() > deadline)
          assert.fail(`no ${JSON.stringify(piece)} in ${JSON.stringify(text)}`);
        await sleep(5);
      }
    },
  };
}

const sandbox = () => Sandbox.connect(SEED.sandbox, { url: url() });

test('create, type, resize, signal, and exit with the code of the session', async () => {
  const sbx = await sandbox();
  const out = collector();
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: out.onData });
  assert.match(term.session, /^pty-\d+$/);
  term.sendInput('echo hi\r');
  await out.until('echo hi\r\n');
  await term.resize({ cols: 120, rows: 40 });
  await out.until('[size 120x40]');
  await term.signal('SIGINT');
  await out.until('[SIGINT]');
  term.sendInput('exit 3\r');
  assert.deepEqual(await term.wait(), { exitCode: 3, signal: null, durationMs: 1 });
  assert.equal(term.offset, Buffer.byteLength(out.text));
});

test('kill ends the session by SIGKILL', async () => {
  const term = await (await sandbox()).pty.create({ cols: 80, rows: 24, onData: () => {} });
  await term.kill();
  const end = await term.wait();
  assert.equal(end.exitCode, null);
  assert.equal(end.signal, 'SIGKILL');
});

test('a disconnected session is reattached with the output since its offset', async () => {
  const sbx = await sandbox();
  const first = collector();
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: first.onData });
  term.sendInput('one\r');
  await first.until('one\r\n');
  const seen = term.offset;
  term.disconnect();
  await assert.rejects(term.wait(), PtyDetachedError);

  // Typed while nobody watched: replayed to the next attachment from `since`.
  const whole = collector();
  const again = await sbx.pty.connect(term.session, { onData: whole.onData });
  await whole.until('one\r\n');
  assert.ok(whole.text.startsWith('one'), whole.text);
  again.sendInput('two\r');
  await whole.until('two\r\n');

  const tail = collector();
  const third = await sbx.pty.connect(term.session, { since: seen, onData: tail.onData });
  await tail.until('two\r\n');
  assert.equal(third.offset, seen + Buffer.byteLength(tail.text));
  assert.ok(!tail.text.includes('one'), tail.text);
  // One watcher at a time: the previous attachment is told it was replaced.
  await assert.rejects(again.wait(), PtyDetachedError);
  third.sendInput('exit 0\r');
  assert.equal((await third.wait()).exitCode, 0);
  // Its exit was reported: the session is gone.
  await assert.rejects(
    sbx.pty.connect(term.session, { onData: () => {} }),
    PtySessionNotFoundError,
  );
});

test('refusals come before the upgrade, as catalog errors', async () => {
  const sbx = await sandbox();
  const onData = () => {};
  await assert.rejects(sbx.pty.create({ cols: 0, rows: 24, onData }), BadRequestError);
  await assert.rejects(sbx.pty.create({ cols: 80, rows: 5000, onData }), BadRequestError);
  await assert.rejects(sbx.pty.connect('pty-x', { onData }), BadRequestError);
  await assert.rejects(sbx.pty.connect('pty-1', { since: -1, onData }), BadRequestError);
  const ghost = await Sandbox.connect(SEED.sandbox, { url: url() });
  cli.fake.failWith('sandboxes', 'pty', new ForkdError('sandbox_not_found', 'no sandbox'));
  await assert.rejects(ghost.pty.create({ cols: 80, rows: 24, onData }), SandboxNotFoundError);
  cli.fake.reset();
  // An agent from before terminal sessions: the driver refuses pty_open as unsupported.
  cli.fake.failWith(
    'sandboxes',
    'pty',
    new ForkdError(
      'unsupported',
      'the guest agent of this sandbox (0.0.9) does not know "pty_open" requests',
    ),
  );
  await assert.rejects(sbx.pty.create({ cols: 80, rows: 24, onData }), UnsupportedError);
  cli.fake.reset();
});

test('a stopped sandbox and an unknown one are refused', async () => {
  const created = await cli.json<{ id: string }>('create');
  await cli.forkd('kill', created.id);
  const stopped = await Sandbox.connect(created.id, { url: url() });
  await assert.rejects(
    stopped.pty.create({ cols: 80, rows: 24, onData: () => {} }),
    (e: Error) => e.name === 'SandboxNotRunningError',
  );
  const r = await cli.forkd('shell', 'sbx-999999999999');
  assert.equal(r.code, 3, r.stderr.toString());
  assert.match(r.stderr.toString(), /sbx-999999999999/);
});

test('a bad control frame is answered with an error frame; the session goes on', async () => {
  const out = collector();
  const errors: Error[] = [];
  const term: PtyHandle = await (
    await sandbox()
  ).pty.create({
    cols: 80,
    rows: 24,
    onData: out.onData,
    onError: (e) => errors.push(e),
  });
  await term.resize({ cols: 0, rows: 0 });
  const deadline = Date.now() + 5000;
  while (errors.length === 0 && Date.now() < deadline) await sleep(5);
  assert.ok(errors[0] instanceof BadRequestError, String(errors[0]));
  term.sendInput('still\r');
  await out.until('still\r\n');
  await term.kill();
  await term.wait();
});

test('a plain GET (no Upgrade) with open fields is a bad request', async () => {
  const fake = new FakeServices();
  const app = await buildApp(fake.services, { requireAuth: false });
  const res = await app.inject(`/v1/sandboxes/${SEED.sandbox}/pty?cols=80&rows=24`);
  assert.equal(res.statusCode, 400);
  assert.match(res.body, /WebSocket/);
  assert.deepEqual(fake.serviceCalls(), []);
  await app.close();
});

test('a plain GET without a query lists the sessions, attached or not', async () => {
  const fake = new FakeServices();
  const app = await buildApp(fake.services, { requireAuth: false });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  try {
    const empty = await app.inject(`/v1/sandboxes/${SEED.sandbox}/pty`);
    assert.equal(empty.statusCode, 200, empty.body);
    assert.deepEqual(empty.json(), { sessions: [] });
    const sbx = await Sandbox.connect(SEED.sandbox, { url: `http://127.0.0.1:${port}` });
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    term.sendInput('hi\r');
    const listed = await sbx.pty.list();
    assert.deepEqual(
      listed.map((s) => [s.session, s.attached, s.exited]),
      [[term.session, true, false]],
    );
    term.disconnect();
    const deadline = Date.now() + 5000;
    while ((await sbx.pty.list())[0]?.attached && Date.now() < deadline) await sleep(5);
    assert.equal((await sbx.pty.list())[0]?.attached, false);
    const gone = await app.inject('/v1/sandboxes/sbx-999999999999/pty');
    assert.equal(gone.statusCode, 404);
  } finally {
    await app.close();
  }
});

test('a client that stops reading is detached and closed with 1013; the session runs on', async () => {
  const fake = new FakeServices();
  const app = await buildApp(fake.services, { requireAuth: false });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  const ws = new WebSocket(
    `ws://127.0.0.1:${port}/v1/sandboxes/${SEED.sandbox}/pty?cols=80&rows=24`,
  );
  try {
    await once(ws, 'open');
    const socket = (ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;
    socket.pause();
    // The fake echoes input: 32 MiB of it overflows the 4 MiB queue plus the kernel's buffers.
    const piece = Buffer.alloc(1024 * 1024, 'x');
    for (let i = 0; i < 32; i++) ws.send(piece);
    const deadline = Date.now() + 20_000;
    const attached = () => fake.ptys.list(SEED.sandbox)[0]?.attached;
    while (attached() !== false && Date.now() < deadline) await sleep(20);
    assert.equal(attached(), false, 'the slow client was not detached');
    const closed = once(ws, 'close');
    socket.resume();
    const [code, reason] = (await closed) as [number, Buffer];
    assert.equal(code, PTY_SLOW_CLOSE);
    assert.match(reason.toString(), /reattach/);
    assert.equal(fake.ptys.list(SEED.sandbox)[0]?.exited, false, 'the session was ended');
  } finally {
    ws.terminate();
    await app.close();
  }
});

test('the upgrade needs the bearer token like every route', async () => {
  const fake = new FakeServices();
  const app = await buildApp(fake.services, {
    requireAuth: true,
    tokens: new Map([['s3cret', 'ci']]),
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  try {
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({
        host: '127.0.0.1',
        port,
        path: `/v1/sandboxes/${SEED.sandbox}/pty`,
        headers: {
          connection: 'Upgrade',
          upgrade: 'websocket',
          'sec-websocket-version': '13',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
        },
      });
      req.on('response', (res) => {
        resolve(res.statusCode ?? 0);
        req.destroy();
      });
      req.on('upgrade', () => reject(new Error('upgraded without a token')));
      req.on('error', reject);
      req.end();
    });
    assert.equal(status, 401);
    assert.deepEqual(fake.serviceCalls(), []);
    const sbx = await Sandbox.connect(SEED.sandbox, {
      url: `http://127.0.0.1:${port}`,
      token: 's3cret',
    });
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    term.sendInput('exit 7\r');
    assert.equal((await term.wait()).exitCode, 7);
  } finally {
    await app.close();
  }
});

test('forkd shell: keys in, output out, the exit code of the session', async () => {
  const r = await runCli(['shell', SEED.sandbox], { env: cli.env, input: 'hello\rexit 4\r' });
  assert.equal(r.code, 4, r.stderr.toString());
  assert.match(out(r), /hello/);
});

test('forkd exec -t runs the command on a terminal; --timeout is refused', async () => {
  const r = await runCli(['exec', '-t', SEED.sandbox, '--', 'sh'], {
    env: cli.env,
    input: 'exit 0\r',
  });
  assert.equal(r.code, 0, r.stderr.toString());
  const opened = cli.fake.calls.filter((c) => c.method === 'pty').at(-1);
  assert.equal((opened?.args[1] as { cmd?: string }).cmd, 'exec sh');
  const bad = await runCli(['exec', '-t', '--timeout', '5', SEED.sandbox, '--', 'sh'], {
    env: cli.env,
  });
  assert.equal(bad.code, 2);
});
