/**
 * An exec the agent cannot start says which input was wrong: a missing or non-directory
 * cwd is `cwd_not_found`, a user the image's /etc/passwd lacks is `user_not_found`, a
 * missing command stays `command_not_found`. Checked on the wire (the agent's `field`) and
 * through the host driver, against the real agent in --listen mode.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import { agentForFile, RawAgentSocket, startAgent } from '../../helpers/agent-process.js';

const { agent, client } = agentForFile();

/** Rejects with the catalog code and details naming the input. */
function refused(code: string, details: Record<string, unknown>) {
  return (e: unknown) => {
    assert.ok(isForkdError(e), String(e));
    assert.equal(e.code, code, e.message);
    for (const [k, v] of Object.entries(details)) assert.equal(e.details?.[k], v, k);
    return true;
  };
}

test('a missing cwd is cwd_not_found naming it, not a missing command', async () => {
  const cwd = join(agent().dir, 'no-such-dir');
  await assert.rejects(
    client().run({ argv: ['true'], cwd }),
    refused('cwd_not_found', { cwd, agent_field: 'cwd' }),
  );
});

test('a cwd that is a file is cwd_not_found too', async () => {
  const file = join(agent().dir, 'a-file');
  writeFileSync(file, 'x');
  await assert.rejects(client().run({ argv: ['true'], cwd: file }), refused('cwd_not_found', {}));
});

test('a user the image lacks is user_not_found naming it; a command still runs after', async () => {
  await assert.rejects(
    client().run({ argv: ['true'], user: 'forkd-no-such-user' }),
    refused('user_not_found', { user: 'forkd-no-such-user', agent_field: 'user' }),
  );
  await assert.rejects(
    client().run({ argv: ['forkd-no-such-command-xyz'] }),
    refused('command_not_found', { agent_field: 'argv' }),
  );
  assert.equal((await client().run({ argv: ['true'] })).exitCode, 0);
});

test('on the wire: the error names the field', async () => {
  // Its own agent: one host connection at a time, and `client` holds the first one's.
  const own = await startAgent();
  const raw = await RawAgentSocket.connect(own.socketPath);
  try {
    await raw.sync();
    await raw.send({ type: 'exec', id: 5, argv: ['true'], cwd: '/forkd-no-such-dir' });
    const [cwd] = (await raw.until((m) => m.id === 5)).slice(-1);
    assert.deepEqual([cwd?.type, cwd?.code, cwd?.field], ['error', 'not_found', 'cwd']);
    await raw.send({ type: 'exec', id: 6, argv: ['true'], user: 'forkd-no-such-user' });
    const [user] = (await raw.until((m) => m.id === 6)).slice(-1);
    assert.deepEqual([user?.type, user?.code, user?.field], ['error', 'not_found', 'user']);
  } finally {
    raw.close();
    await own.stop();
  }
});
