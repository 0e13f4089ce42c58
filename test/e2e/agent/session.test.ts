/**
 * Sessions against the real agent: a host that vanishes mid-exec, a resync on the same
 * socket, and what the agent must forget when a new session starts (old output, half-written
 * files, a half-read line).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import { AgentClient } from '../../../src/drivers/agent/client.js';
import { SYNC_BYTE } from '../../../src/drivers/agent/wire.js';
import { RawAgentSocket, startAgent, type AgentProcess } from '../../helpers/agent-process.js';

// One connection at a time: every test closes what it opens.
let agent: AgentProcess;

before(async () => {
  agent = await startAgent();
});

after(async () => {
  await agent?.stop();
});

const unreachable = (e: unknown) => isForkdError(e, 'agent_unreachable');

test('a host that disconnects mid-exec can reconnect and work', { timeout: 30_000 }, async () => {
  const first = await AgentClient.connect(agent.socketPath);
  const handle = first.exec({ argv: ['sleep', '30'] });
  agent.track(await handle.started);
  first.close();
  await assert.rejects(handle.result, unreachable);

  const second = await AgentClient.connect(agent.socketPath);
  try {
    await second.ping();
    const r = await second.run({ argv: ['echo', 'after'] });
    assert.equal(r.stdout.toString(), 'after\n');
  } finally {
    second.close();
  }
});

test('resync on the same socket ends old requests and keeps serving', { timeout: 30_000 }, async () => {
  const client = await AgentClient.connect(agent.socketPath);
  try {
    const handle = client.exec({ argv: ['sleep', '30'] });
    agent.track(await handle.started);
    await client.resync();
    await assert.rejects(handle.result, unreachable);
    await client.ping();
    assert.equal((await client.run({ argv: ['echo', 'ok'] })).exitCode, 0);
  } finally {
    client.close();
  }
});

test('an old session exec stays silent after a new sync', { timeout: 30_000 }, async (t) => {
  const raw = await RawAgentSocket.connect(agent.socketPath);
  t.after(() => raw.close());
  await raw.sync();
  await raw.send({ type: 'exec', id: 1, argv: ['sh', '-c', 'sleep 0.5; echo late; exit 3'] });
  const [started] = await raw.until((m) => m.id === 1);
  assert.equal(started?.type, 'started');
  agent.track(Number(started?.pid));
  await raw.sync();
  const stray = (await raw.drain(1500)).filter((m) => m.id === 1);
  assert.deepEqual(stray, [], 'output or result of the old session leaked');
  await raw.send({ type: 'ping', id: 2 });
  assert.deepEqual(await raw.next(), { type: 'result', id: 2 });
});

test('a new session removes the temp file of an abandoned upload', { timeout: 30_000 }, async (t) => {
  const raw = await RawAgentSocket.connect(agent.socketPath);
  t.after(() => raw.close());
  await raw.sync();
  const target = join(agent.dir, 'abandoned.bin');
  const before = readdirSync(agent.dir).sort();
  await raw.send({ type: 'file_write', id: 1, path: target });
  await raw.send({ type: 'data', id: 1, data: Buffer.from('partial').toString('base64') });
  await raw.send({ type: 'ping', id: 2 });
  await raw.until((m) => m.id === 2);
  await raw.sync();
  await raw.send({ type: 'ping', id: 3 });
  await raw.until((m) => m.id === 3);
  assert.deepEqual(readdirSync(agent.dir).sort(), before);
});

test('0xFF drops a half-sent line', { timeout: 10_000 }, async (t) => {
  const raw = await RawAgentSocket.connect(agent.socketPath);
  t.after(() => raw.close());
  await raw.sync();
  await raw.write('{"type":"ping","id":5,"pad":"');
  await raw.sync();
  await raw.send({ type: 'ping', id: 6 });
  const seen = await raw.until((m) => m.id === 6);
  assert.deepEqual(seen, [{ type: 'result', id: 6 }], 'the partial line was answered');
});

test('a sync byte inside a line resets it too', { timeout: 10_000 }, async (t) => {
  const raw = await RawAgentSocket.connect(agent.socketPath);
  t.after(() => raw.close());
  await raw.sync();
  const line = Buffer.from('{"type":"ping","id":8}\n');
  await raw.write(Buffer.concat([Buffer.from('{"type":"ping",'), Buffer.from([SYNC_BYTE]), line]));
  const seen = await raw.until((m) => m.id === 8);
  assert.deepEqual(seen, [{ type: 'result', id: 8 }]);
});
