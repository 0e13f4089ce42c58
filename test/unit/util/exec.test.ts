/**
 * A host tool killed by a signal forkd did not send (the OOM killer, a user) is reported as
 * killed, naming the tool and the signal, not as a bare "Command failed"; a timeout of ours
 * keeps its own message.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isForkdError } from '../../../src/errors.js';
import { run, runStreaming } from '../../../src/util/exec.js';

const killedBy = (e: unknown) =>
  isForkdError(e, 'internal') && /^sh was killed \(SIGKILL\) before it finished/.test(e.message);

test('a tool SIGKILLed from outside: named, with the signal', async () => {
  await assert.rejects(run('sh', ['-c', 'kill -9 $$']), killedBy);
  await assert.rejects(
    runStreaming('sh', ['-c', 'kill -9 $$'], () => undefined),
    killedBy,
  );
});

test('a timeout of ours is not reported as a kill from outside', async () => {
  await assert.rejects(
    run('sleep', ['5'], { timeoutMs: 100 }),
    (e: unknown) => isForkdError(e, 'internal') && !/killed \(/.test(e.message),
  );
});
