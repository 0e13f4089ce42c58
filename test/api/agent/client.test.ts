/**
 * The client's own behaviour against a scripted fake agent: what the real agent cannot be
 * made to do on demand (stale bytes, a wrong protocol, silence, a dropped socket, malformed
 * replies) and the host-side rules (ids, chunk sizes, error mapping).
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { isForkdError } from '../../../src/errors.js';
import { AgentClient } from '../../../src/drivers/agent/client.js';
import {
  LineReader,
  MAX_DATA_CHUNK,
  SYNC_BYTE,
  parseLine,
  type AgentMessage,
} from '../../../src/drivers/agent/wire.js';

type Reply = (msg: Record<string, unknown>) => void;

interface FakeOptions {
  protocol?: number;
  /** Bytes written just before the real sync reply (given the host's nonce). */
  prelude?(nonce: unknown): Buffer;
  /** Answers every non-sync request; default: `result` for all. */
  respond?(msg: AgentMessage, reply: Reply, socket: Socket): void;
}

interface Fake {
  path: string;
  server: Server;
  requests: AgentMessage[];
}

const answerAll: NonNullable<FakeOptions['respond']> = (msg, reply) => {
  if (msg.id !== undefined) reply({ type: 'result', id: msg.id });
};

/** A unix-socket server speaking just enough protocol; removed after the test. */
async function fakeAgent(t: TestContext, opts: FakeOptions = {}, listen = true): Promise<Fake> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-fake-agent-'));
  const fake: Fake = { path: join(dir, 'agent.sock'), server: createServer(), requests: [] };
  fake.server.on('connection', (socket) => serve(socket, fake, opts));
  t.after(async () => {
    fake.server.close();
    await rm(dir, { recursive: true, force: true });
  });
  if (listen) await new Promise<void>((resolve) => fake.server.listen(fake.path, resolve));
  return fake;
}

function serve(socket: Socket, fake: Fake, opts: FakeOptions): void {
  const reply: Reply = (msg) => socket.write(JSON.stringify(msg) + '\n');
  const reader = new LineReader((line) => {
    const msg = parseLine(line);
    if (!msg) return;
    if (msg.type === 'sync') {
      socket.write(opts.prelude?.(msg.nonce) ?? Buffer.alloc(0));
      socket.write(Buffer.from([SYNC_BYTE]));
      reply({ type: 'sync', id: 0, nonce: msg.nonce, protocol: opts.protocol ?? 1, agent: 'fake' });
      return;
    }
    fake.requests.push(msg);
    (opts.respond ?? answerAll)(msg, reply, socket);
  });
  socket.on('data', (chunk: Buffer) => reader.push(chunk));
  socket.on('error', () => {});
}

async function connect(t: TestContext, fake: Fake, warnings: string[] = []): Promise<AgentClient> {
  const client = await AgentClient.connect(fake.path, {
    timeoutMs: 3000,
    onWarning: (m) => warnings.push(m),
  });
  t.after(() => client.close());
  return client;
}

function assertCode(code: string) {
  return (e: unknown) => {
    assert.ok(isForkdError(e), `expected a ForkdError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    return true;
  };
}

test('LineReader splits across chunks, resets on 0xFF and drops oversized lines', () => {
  const lines: [string, boolean][] = [];
  const oversized: number[] = [];
  const reader = new LineReader(
    (line, afterSync) => lines.push([line.toString(), afterSync]),
    (n) => oversized.push(n),
    10,
  );
  reader.push(Buffer.from('ab'));
  reader.push(Buffer.from('c\nstale'));
  reader.push(Buffer.from([SYNC_BYTE]));
  reader.push(Buffer.from('fresh\n0123456789AB\nok\n'));
  assert.deepEqual(lines, [
    ['abc', false],
    ['fresh', true],
    ['ok', false],
  ]);
  assert.deepEqual(oversized, [12]);
});

test('connect retries until the socket appears', async (t) => {
  const fake = await fakeAgent(t, {}, false);
  setTimeout(() => fake.server.listen(fake.path), 300);
  const client = await connect(t, fake);
  await client.ping();
});

test('connect gives up with agent_unreachable when nothing listens', async () => {
  const started = Date.now();
  await assert.rejects(
    AgentClient.connect('/nonexistent/forkd/agent.sock', { timeoutMs: 300 }),
    assertCode('agent_unreachable'),
  );
  assert.ok(Date.now() - started < 2000);
});

test('connect gives up with agent_unreachable when the agent never answers sync', async (t) => {
  const fake = await fakeAgent(t);
  fake.server.removeAllListeners('connection');
  fake.server.on('connection', (s) => s.on('error', () => {}));
  await assert.rejects(
    AgentClient.connect(fake.path, { timeoutMs: 300 }),
    assertCode('agent_unreachable'),
  );
});

test('a missed sync is said again within tens of milliseconds', async (t) => {
  const fake = await fakeAgent(t);
  fake.server.removeAllListeners('connection');
  let syncs = 0;
  fake.server.on('connection', (socket) => {
    // Like a guest that was restored while the first syncs were on their way: it misses two.
    const reader = new LineReader((line) => {
      const msg = parseLine(line);
      if (msg?.type !== 'sync' || ++syncs < 3) return;
      reader.reset();
      socket.removeAllListeners('data');
      serve(socket, fake, {});
      socket.write(Buffer.from([SYNC_BYTE]));
      socket.write(JSON.stringify({ type: 'sync', id: 0, nonce: msg.nonce, protocol: 1, agent: 'fake' }) + '\n');
    });
    socket.on('data', (chunk: Buffer) => reader.push(chunk));
    socket.on('error', () => {});
  });
  // Well under the old fixed resend interval of 1 s: the third sync goes out after 75 ms.
  const client = await AgentClient.connect(fake.path, { timeoutMs: 900 });
  t.after(() => client.close());
  await client.ping();
  assert.ok(syncs >= 3);
});

test('only a 0xFF-prefixed sync reply with our nonce ends the handshake', async (t) => {
  // Each of these would make connect fail (protocol 2) if the client trusted it.
  const stale = (nonce: unknown) =>
    Buffer.concat([
      Buffer.from(`garbage\n{"type":"sync","id":0,"nonce":${String(nonce)},"protocol":2}\n`),
      Buffer.from([SYNC_BYTE]),
      Buffer.from('{"type":"sync","id":0,"nonce":12345,"protocol":2}\n'),
      Buffer.from([SYNC_BYTE]),
      Buffer.from(`{"type":"sync","id":0,"nonce":${String(nonce)},"proto`),
    ]);
  const fake = await fakeAgent(t, { prelude: stale });
  const client = await connect(t, fake);
  await client.ping();
});

test('an agent speaking another protocol is refused naming both versions', async (t) => {
  const fake = await fakeAgent(t, { protocol: 2 });
  await assert.rejects(AgentClient.connect(fake.path, { timeoutMs: 2000 }), (e: unknown) => {
    assertCode('agent_unreachable')(e);
    assert.match((e as Error).message, /protocol 2.*protocol 1/);
    return true;
  });
});

test('request ids start at 1 and increase', async (t) => {
  const fake = await fakeAgent(t);
  const client = await connect(t, fake);
  await client.ping();
  await client.ping();
  await client.stat('/x');
  assert.deepEqual(
    fake.requests.map((m) => m.id),
    [1, 2, 3],
  );
});

test('a silent call rejects with timeout and its late reply is ignored', async (t) => {
  const late: Reply[] = [];
  const fake = await fakeAgent(t, {
    respond: (msg, reply) => {
      if (msg.id === 1) late.push(() => reply({ type: 'result', id: 1 }));
      else reply({ type: 'result', id: msg.id });
    },
  });
  const client = await connect(t, fake);
  await assert.rejects(client.ping({ timeoutMs: 100 }), assertCode('timeout'));
  late[0]?.({});
  await client.ping();
});

test('an aborted call rejects with the abort reason', async (t) => {
  const fake = await fakeAgent(t, { respond: () => {} });
  const client = await connect(t, fake);
  const ac = new AbortController();
  const pending = client.ping({ signal: ac.signal });
  ac.abort(new Error('caller gave up'));
  await assert.rejects(pending, /caller gave up/);
});

test('close rejects everything pending with agent_unreachable and calls onClose', async (t) => {
  const fake = await fakeAgent(t, { respond: () => {} });
  const client = await connect(t, fake);
  const closed: (Error | undefined)[] = [];
  client.onClose((err) => closed.push(err));
  const ping = client.ping();
  const exec = client.exec({ argv: ['sleep', '9'] });
  client.close();
  await assert.rejects(ping, assertCode('agent_unreachable'));
  await assert.rejects(exec.started, assertCode('agent_unreachable'));
  await assert.rejects(exec.result, assertCode('agent_unreachable'));
  await assert.rejects(client.ping(), assertCode('agent_unreachable'));
  assert.deepEqual(closed, [undefined]);
});

test('a dropped socket rejects pending requests and reports the loss', async (t) => {
  const fake = await fakeAgent(t, { respond: (_msg, _reply, socket) => socket.destroy() });
  const client = await connect(t, fake);
  const lost = new Promise<Error | undefined>((resolve) => client.onClose(resolve));
  await assert.rejects(client.ping(), assertCode('agent_unreachable'));
  assert.ok((await lost) instanceof Error);
});

test('malformed agent lines are reported and skipped', async (t) => {
  const fake = await fakeAgent(t, {
    respond: (msg, reply, socket) => {
      socket.write('not json\n[1,2]\n{"no":"type"}\n\n{"type":"error","id":null,"code":"bad_json"}\n');
      reply({ type: 'result', id: msg.id, extra: { unknown: 'fields are fine' } });
    },
  });
  const warnings: string[] = [];
  const client = await connect(t, fake, warnings);
  await client.ping();
  assert.equal(warnings.length, 4, warnings.join('\n'));
});

test('agent error codes map onto the catalog', async (t) => {
  const codes: Record<string, string> = {
    '/nope': 'not_found',
    '/secret': 'permission',
    '/broken': 'io',
  };
  const fake = await fakeAgent(t, {
    respond: (msg, reply) => {
      const code = msg.type === 'exec' ? 'not_found' : codes[String(msg.path)];
      reply({ type: 'error', id: msg.id, code, message: `${String(msg.path)}: it failed` });
    },
  });
  const client = await connect(t, fake);
  await assert.rejects(client.stat('/nope'), assertCode('guest_file_not_found'));
  await assert.rejects(client.readFile('/nope'), assertCode('guest_file_not_found'));
  await assert.rejects(client.list('/secret'), assertCode('guest_permission_denied'));
  await assert.rejects(client.remove('/broken'), (e: unknown) => {
    assertCode('guest_error')(e);
    assert.equal((e as { details: { agent_code: string } }).details.agent_code, 'io');
    return true;
  });
  const exec = client.exec({ argv: ['nosuch'] });
  await assert.rejects(exec.started, assertCode('command_not_found'));
  await assert.rejects(exec.result, assertCode('command_not_found'));
});

test('bad requests are refused before they reach the agent', async (t) => {
  const fake = await fakeAgent(t);
  const client = await connect(t, fake);
  await assert.rejects(client.exec({ argv: [] }).result, assertCode('bad_request'));
  const huge = ['echo', 'x'.repeat(2 * 1024 * 1024)];
  await assert.rejects(client.exec({ argv: huge }).result, assertCode('bad_request'));
  await assert.rejects(client.stat('relative/path'), assertCode('bad_request'));
  await assert.rejects(
    client.configure({ entropy: Buffer.alloc(513) }),
    assertCode('bad_request'),
  );
  assert.equal(fake.requests.length, 0);
  await client.ping();
});

test('stdin is sent in pieces of at most 192 KiB', async (t) => {
  const fake = await fakeAgent(t, {
    respond: (msg, reply) => {
      if (msg.type === 'exec') reply({ type: 'started', id: msg.id, pid: 42 });
      if (msg.type === 'stdin' && msg.eof) {
        reply({ type: 'result', id: msg.id, exit_code: 0, signal: null, duration_ms: 1 });
      }
    },
  });
  const client = await connect(t, fake);
  const data = Buffer.alloc(MAX_DATA_CHUNK * 2 + 1000, 7);
  const r = await client.run({ argv: ['cat'], stdinData: data });
  assert.equal(r.exitCode, 0);
  const pieces = fake.requests
    .filter((m) => m.type === 'stdin' && typeof m.data === 'string')
    .map((m) => Buffer.from(String(m.data), 'base64').length);
  assert.deepEqual(pieces, [MAX_DATA_CHUNK, MAX_DATA_CHUNK, 1000]);
});

test('a file read whose size disagrees with its chunks is an error', async (t) => {
  const fake = await fakeAgent(t, {
    respond: (msg, reply) => {
      reply({ type: 'data', id: msg.id, data: Buffer.from('abc').toString('base64') });
      reply({ type: 'result', id: msg.id, size: 4 });
    },
  });
  const client = await connect(t, fake);
  await assert.rejects(client.readFile('/f'), assertCode('guest_error'));
  await sleep(0);
});

test('an agent from before terminal sessions: openPty is refused as unsupported, never sent', async (t) => {
  const { OldAgent } = await import('../../helpers/old-agent.js');
  const { PROTOCOL_V1_TYPES } = await import('../../../src/drivers/agent/wire.js');
  const old = await OldAgent.start([...PROTOCOL_V1_TYPES]);
  t.after(() => old.close());
  const client = await AgentClient.connect(old.socketPath, { timeoutMs: 5000 });
  t.after(() => client.close());
  await assert.rejects(
    client.openPty({ argv: ['/bin/sh'], cols: 80, rows: 24 }),
    (e: unknown) => isForkdError(e) && e.code === 'unsupported' && /"pty_open"/.test(e.message),
  );
  await assert.rejects(client.attachPty({ pty: 1 }), (e: unknown) => isForkdError(e) && e.code === 'unsupported');
  assert.deepEqual(old.received, [], 'nothing was sent');
});
