/**
 * Evals count against the daemon's cap on running commands: a ContextManager over a fake
 * agent whose context answers only when told to, and a real Gate of one slot. The slot is
 * held while the code runs and freed when it ends, fails, or names a missing context.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AgentClient } from '../../../src/drivers/agent/client.js';
import type { ExecHandlers } from '../../../src/drivers/agent/exec.js';
import { isForkdError } from '../../../src/errors.js';
import { ContextManager } from '../../../src/services/contexts/service.js';
import { Gate } from '../../../src/services/sandboxes/gate.js';

/** An agent whose eval pipes wait for `finish()`; a socket named `gone` is not there. */
function fakeAgent() {
  const waiting: (() => void)[] = [];
  const agent = {
    exec(req: { argv: string[] }, handlers: ExecHandlers = {}) {
      let exit!: (r: { exitCode: number; timedOut: boolean }) => void;
      const result = new Promise<{ exitCode: number; timedOut: boolean }>((r) => (exit = r));
      const missing = req.argv.some((a) => a.includes('/gone.sock'));
      return {
        started: Promise.resolve(1),
        writeStdin: async () => undefined,
        endStdin: async () => {
          if (missing) return exit({ exitCode: 3, timedOut: false });
          handlers.onStdout?.(Buffer.from('{"type":"stdout","text":"hi"}\n'));
          waiting.push(() => {
            handlers.onStdout?.(
              Buffer.from('{"type":"end","execution_count":1,"duration_ms":1}\n'),
            );
            exit({ exitCode: 0, timedOut: false });
          });
        },
        kill: async () => undefined,
        result,
      };
    },
  } as unknown as AgentClient;
  return { agent, finish: () => waiting.splice(0).forEach((f) => f()) };
}

test('an eval holds an exec slot until its code ends; past the cap it is capacity', async () => {
  const gate = new Gate('commands running', 1, 1);
  const { agent, finish } = fakeAgent();
  const contexts = new ContextManager({
    agentOf: async () => agent,
    sandboxes: { kill: async () => undefined },
    branch: {} as never,
    execSlot: () => gate.enter(),
  });
  const first = contexts.eval('sbx-1', { code: 'x', context: 'a' });
  await new Promise((r) => setImmediate(r));
  assert.equal(gate.count, 1);
  await assert.rejects(
    contexts.eval('sbx-1', { code: 'y', context: 'a' }),
    (e) => isForkdError(e) && e.code === 'capacity',
  );
  finish();
  assert.deepEqual((await first).logs.stdout, ['hi']);
  assert.equal(gate.count, 0);
  await assert.rejects(
    contexts.eval('sbx-1', { code: 'z', context: 'gone' }),
    (e) => isForkdError(e) && e.code === 'context_not_found',
  );
  assert.equal(gate.count, 0, 'a missing context frees its slot');
});
