/**
 * Hostile input straight onto the agent's socket (after a valid handshake): every bad line
 * gets an error reply with its code, the agent never exits, and the next good request works.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { RawAgentSocket, startAgent, type AgentProcess } from '../../helpers/agent-process.js';
import { MAX_REQUEST_LINE } from '../../../src/drivers/agent/wire.js';

let agent: AgentProcess;
let raw: RawAgentSocket;

before(async () => {
  agent = await startAgent();
  raw = await RawAgentSocket.connect(agent.socketPath);
  await raw.sync();
});

after(async () => {
  raw?.close();
  await agent?.stop();
});

/** Random bytes that are neither the resync byte nor a newline, and never valid JSON. */
function garbage(size: number): Buffer {
  const bytes = randomBytes(size);
  for (let i = 0; i < size; i++) if (bytes[i] === 0xff || bytes[i] === 0x0a) bytes[i] = 0;
  bytes[0] = 0x01;
  return bytes;
}

const nest = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

const CASES: { name: string; line: string | Buffer; code: string; id?: number | null }[] = [
  { name: 'not JSON', line: 'hello, agent', code: 'bad_json', id: null },
  { name: 'truncated JSON', line: '{"type":"ping","id":', code: 'bad_json', id: null },
  { name: 'a JSON array', line: '[{"type":"ping","id":1}]', code: 'bad_json', id: null },
  { name: 'a JSON string', line: '"ping"', code: 'bad_json', id: null },
  { name: 'an unknown type', line: '{"type":"frobnicate","id":41}', code: 'unknown_type', id: 41 },
  { name: 'no type', line: '{"id":42}', code: 'unknown_type', id: 42 },
  { name: 'a non-string type', line: '{"type":7,"id":43}', code: 'unknown_type', id: 43 },
  { name: 'a string id', line: '{"type":"ping","id":"x"}', code: 'bad_request', id: null },
  {
    name: 'a 2 MiB line',
    line: `{"type":"ping","id":44,"pad":"${'a'.repeat(2 * 1024 * 1024)}"}`,
    code: 'too_large',
    id: null,
  },
  {
    name: '50-deep nesting',
    line: `{"type":"ping","id":45,"x":${nest(49)}}`,
    code: 'too_large',
    id: null,
  },
  {
    name: '9-deep nesting',
    line: `{"type":"ping","id":46,"x":${nest(8)}}`,
    code: 'too_large',
    id: null,
  },
  { name: 'binary garbage', line: garbage(4096), code: 'bad_json', id: null },
  {
    name: 'an exec with wrong field types',
    line: '{"type":"exec","id":47,"argv":"echo hi"}',
    code: 'bad_request',
    id: 47,
  },
  {
    name: 'an exec with a non-string argv entry',
    line: '{"type":"exec","id":48,"argv":["echo",1]}',
    code: 'bad_request',
    id: 48,
  },
  {
    name: 'an argv of 4097 entries',
    line: JSON.stringify({ type: 'exec', id: 49, argv: Array(4097).fill('x') }),
    code: 'too_large',
    id: 49,
  },
];

let nextPing = 1000;

/** Sends one line, expects exactly one error reply, then checks a ping still works. */
async function expectError(line: string | Buffer, code: string, id: number | null | undefined) {
  const ping = nextPing++;
  await raw.write(Buffer.concat([Buffer.from(line), Buffer.from(`\n{"type":"ping","id":${ping}}\n`)]));
  const seen = await raw.until((m) => m.id === ping);
  assert.equal(seen.length, 2, `expected one error then the ping: ${JSON.stringify(seen)}`);
  const [error, pong] = seen;
  assert.equal(error?.type, 'error', JSON.stringify(error));
  assert.equal(error?.code, code, JSON.stringify(error));
  if (id !== undefined) assert.equal(error?.id, id, JSON.stringify(error));
  assert.deepEqual(pong, { type: 'result', id: ping });
}

for (const c of CASES) {
  test(`${c.name} gets ${c.code} and the agent goes on`, { timeout: 20_000 }, async () => {
    await expectError(c.line, c.code, c.id);
    assert.ok(agent.alive(), `the agent exited: ${agent.output()}`);
  });
}

test('8-deep nesting and a line just under 1 MiB are accepted', { timeout: 20_000 }, async () => {
  await raw.write(`{"type":"ping","id":50,"x":${nest(7)}}\n`);
  assert.deepEqual(await raw.next(), { type: 'result', id: 50 });
  const pad = 'p'.repeat(MAX_REQUEST_LINE - 100);
  await raw.write(`{"type":"ping","id":51,"pad":"${pad}"}\n`);
  assert.deepEqual(await raw.next(), { type: 'result', id: 51 });
});

test('1000 bad lines in a row, then a ping works', { timeout: 60_000 }, async () => {
  await raw.write('this is not json\n'.repeat(1000) + '{"type":"ping","id":60}\n');
  const seen = await raw.until((m) => m.id === 60, 30_000);
  const errors = seen.filter((m) => m.type === 'error');
  assert.equal(errors.length, 1000);
  assert.ok(errors.every((m) => m.code === 'bad_json' && m.id === null));
  assert.deepEqual(seen.at(-1), { type: 'result', id: 60 });
  assert.ok(agent.alive());
});

test('a second client after all this still works', async () => {
  raw.close();
  raw = await RawAgentSocket.connect(agent.socketPath);
  await raw.sync();
  await raw.send({ type: 'ping', id: 1 });
  assert.deepEqual(await raw.next(), { type: 'result', id: 1 });
});
