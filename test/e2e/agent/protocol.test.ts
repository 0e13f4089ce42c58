/**
 * The agent protocol's contract against the real agent: the handshake, ping/info, and a
 * frozen inventory of message types and error codes, so PROTOCOL.md, the agent and this host
 * cannot drift apart unnoticed.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { AgentClient } from '../../../src/drivers/agent/client.js';
import { PROTOCOL_V1_TYPES, PROTOCOL_VERSION } from '../../../src/drivers/agent/wire.js';
import { isForkdError } from '../../../src/errors.js';
import { OldAgent } from '../../helpers/old-agent.js';
import { REPO_ROOT, RawAgentSocket, startAgent, type AgentProcess } from '../../helpers/agent-process.js';

/** The request headings of PROTOCOL.md "Requests", in order. */
const REQUEST_TYPES = [
  'ping',
  'info',
  'exec',
  'stdin',
  'signal',
  'file_write',
  'file_read',
  'stat',
  'list',
  'mkdir',
  'remove',
  'configure',
  'pty_open',
  'pty_attach',
  'pty_input',
  'pty_resize',
  'pty_signal',
  'pty_close',
  'pty_detach',
  'pty_list',
  'xattr_set',
  'flush',
];
/** Every `"type":"…"` that appears in PROTOCOL.md's examples (both directions). */
const MESSAGE_TYPES = [
  'configure',
  'data',
  'eof',
  'error',
  'exec',
  'file_read',
  'file_write',
  'flush',
  'list',
  'mkdir',
  'ping',
  'pty_attach',
  'pty_close',
  'pty_detach',
  'pty_input',
  'pty_list',
  'pty_open',
  'pty_resize',
  'pty_signal',
  'remove',
  'result',
  'signal',
  'started',
  'stat',
  'stderr',
  'stdin',
  'stdout',
  'sync',
  'xattr_set',
];
const ERROR_CODES = [
  'bad_json',
  'too_large',
  'bad_request',
  'unknown_type',
  'not_found',
  'permission',
  'exists',
  'not_dir',
  'is_dir',
  'no_such_request',
  'io',
  'busy',
];

/** A minimal request of each type and the terminal reply the spec promises for it. */
const PROBES: { msg: Record<string, unknown>; expect: string }[] = [
  { msg: { type: 'ping' }, expect: 'result' },
  { msg: { type: 'info' }, expect: 'result' },
  { msg: { type: 'exec' }, expect: 'bad_request' },
  { msg: { type: 'stdin', eof: true }, expect: 'no_such_request' },
  { msg: { type: 'signal', target: 424242, signal: 'SIGKILL' }, expect: 'no_such_request' },
  { msg: { type: 'file_write' }, expect: 'bad_request' },
  { msg: { type: 'file_read' }, expect: 'bad_request' },
  { msg: { type: 'stat' }, expect: 'bad_request' },
  { msg: { type: 'list' }, expect: 'bad_request' },
  { msg: { type: 'mkdir' }, expect: 'bad_request' },
  { msg: { type: 'remove' }, expect: 'bad_request' },
  { msg: { type: 'configure' }, expect: 'result' },
  { msg: { type: 'pty_open' }, expect: 'bad_request' },
  { msg: { type: 'pty_attach', pty: 424242 }, expect: 'no_such_request' },
  { msg: { type: 'pty_input', data: '' }, expect: 'no_such_request' },
  { msg: { type: 'pty_resize', target: 424242, cols: 80, rows: 24 }, expect: 'no_such_request' },
  { msg: { type: 'pty_signal', target: 424242, signal: 'SIGINT' }, expect: 'no_such_request' },
  { msg: { type: 'pty_close', target: 424242 }, expect: 'no_such_request' },
  { msg: { type: 'pty_detach', target: 424242 }, expect: 'no_such_request' },
  { msg: { type: 'pty_list' }, expect: 'result' },
  { msg: { type: 'xattr_set' }, expect: 'bad_request' },
  { msg: { type: 'flush' }, expect: 'result' },
];

const protocolDoc = () => readFileSync(join(REPO_ROOT, 'agent', 'PROTOCOL.md'), 'utf8');

// The agent serves one connection at a time: every test closes what it opens.
let agent: AgentProcess | undefined;

before(async () => {
  agent = await startAgent();
});

after(async () => {
  await agent?.stop();
});

test('PROTOCOL.md lists exactly the frozen request types', () => {
  const requests = protocolDoc().split('\n## Requests')[1]?.split('\n## ')[0] ?? '';
  const headings = [...requests.matchAll(/^### (\w+)/gm)].map((m) => m[1]);
  assert.deepEqual(headings, REQUEST_TYPES);
});

test('PROTOCOL.md examples use exactly the frozen message types', () => {
  const types = new Set([...protocolDoc().matchAll(/"type":"(\w+)"/g)].map((m) => m[1]));
  assert.deepEqual([...types].sort(), [...MESSAGE_TYPES].sort());
});

test('PROTOCOL.md lists exactly the frozen error codes', () => {
  const para = protocolDoc().split('Error codes:')[1]?.split('\n\n')[0] ?? '';
  assert.deepEqual(
    [...para.matchAll(/`(\w+)`/g)].map((m) => m[1]),
    ERROR_CODES,
  );
});

test('the frozen inventory and the probes agree', () => {
  assert.deepEqual(
    PROBES.map((p) => p.msg.type),
    REQUEST_TYPES,
  );
});

test('sync echoes a 53-bit nonce, protocol 1 and the agent version', async (t) => {
  const raw = await RawAgentSocket.connect(agent!.socketPath);
  t.after(() => raw.close());
  const nonce = 2 ** 53 - 1;
  const reply = await raw.sync(nonce);
  assert.equal(reply.id, 0);
  assert.equal(reply.nonce, nonce);
  assert.equal(reply.protocol, PROTOCOL_VERSION);
  assert.match(String(reply.agent), /^\d+\.\d+\.\d+/);
  assert.deepEqual(
    [...(reply.types as string[])].sort(),
    ['sync', 'data', 'eof', ...REQUEST_TYPES].sort(),
    'the sync reply lists every request type the agent knows',
  );
});

test("the host keeps protocol 1's first inventory for agents that list no types", () => {
  const first = REQUEST_TYPES.slice(0, REQUEST_TYPES.indexOf('configure') + 1);
  assert.deepEqual([...PROTOCOL_V1_TYPES].sort(), ['sync', 'data', 'eof', ...first].sort());
});

test('a request the agent did not list is refused on the host as unsupported', async (t) => {
  // An agent frozen in an old snapshot that knows fewer request types than this host.
  const old = await OldAgent.start(['sync', 'ping']);
  t.after(() => old.close());
  const client = await AgentClient.connect(old.socketPath, { timeoutMs: 5000 });
  t.after(() => client.close());
  await client.ping();
  await assert.rejects(client.info(), (e: unknown) => {
    assert.ok(isForkdError(e) && e.code === 'unsupported', String(e));
    assert.match(e.message, /does not know "info" requests; recreate/);
    return true;
  });
  assert.deepEqual(old.received, ['ping'], 'the unknown request was never sent');
});

test('an agent that lists no types is taken to know the protocol 1 inventory', async (t) => {
  const old = await OldAgent.start(undefined);
  t.after(() => old.close());
  const client = await AgentClient.connect(old.socketPath, { timeoutMs: 5000 });
  t.after(() => client.close());
  await client.info();
  assert.deepEqual(old.received, ['info']);
  // Such an agent has no xattr_set: a write with xattrs is refused before it starts.
  assert.throws(
    () => client.requireXattrs(),
    (e: unknown) => isForkdError(e) && e.code === 'unsupported',
  );
  await assert.rejects(client.setXattrs('/a', { 'user.a': 'b' }), /does not know "xattr_set"/);
  assert.deepEqual(old.received, ['info'], 'nothing was sent for it');
});

test('every request type is known to the agent and answered as specified', async (t) => {
  const raw = await RawAgentSocket.connect(agent!.socketPath);
  t.after(() => raw.close());
  await raw.sync();
  for (const [i, probe] of PROBES.entries()) {
    const id = 100 + i;
    // stdin addresses an exec by its own id: a fresh one names no exec.
    await raw.send({ ...probe.msg, id });
    const [reply] = await raw.until((m) => m.id === id);
    const got = reply?.type === 'error' ? reply.code : reply?.type;
    assert.equal(got, probe.expect, `${String(probe.msg.type)}: ${JSON.stringify(reply)}`);
  }
});

test('the client handshakes, pings and reads info', async (t) => {
  const client = await AgentClient.connect(agent!.socketPath);
  t.after(() => client.close());
  assert.match(client.agentVersion, /^\d+\.\d+\.\d+/);
  await client.ping();
  const info = await client.info();
  assert.equal(info.protocol, 1);
  assert.match(info.agent, /^\d+\.\d+\.\d+/);
  assert.ok(info.kernel.length > 0, 'kernel release');
  assert.ok(info.uptimeMs > 0, 'uptime');
  assert.equal(info.hostname, hostname(), 'hostname (--listen runs on this host)');
});

test('configure takes time and entropy (the agent leaves the clock alone in --listen)', async () => {
  const client = await AgentClient.connect(agent!.socketPath);
  try {
    await client.configure({ timeMs: Date.now(), entropy: randomBytes(512) });
  } finally {
    client.close();
  }
  const raw = await RawAgentSocket.connect(agent!.socketPath);
  try {
    await raw.sync();
    await raw.send({ type: 'configure', id: 1, entropy: randomBytes(600).toString('base64') });
    const reply = await raw.next();
    assert.deepEqual([reply.type, reply.id, reply.code], ['error', 1, 'too_large']);
  } finally {
    raw.close();
  }
});
