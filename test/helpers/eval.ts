/**
 * What the eval e2e tests read from an answer: the JSON of an Execution's main result (the
 * eval must not have raised) and, for a fan-out, each child's in order (none may have failed).
 */
import assert from 'node:assert/strict';
import type { EvalForkResultT, ExecutionT } from '../../src/contract/contexts.js';

export function mainJson(x: ExecutionT): unknown {
  assert.equal(x.error, null, x.error?.traceback);
  return x.results.find((r) => r.is_main_result)?.data['application/json'];
}

export function fanOutJson(out: EvalForkResultT): unknown[] {
  return out.results.map((r) => {
    assert.equal(r.failure, null, JSON.stringify(r.failure));
    return mainJson(r.execution!);
  });
}
