/**
 * A daemon error crosses into containerd with a gRPC code containerd maps to its own kinds
 * (NotFound, InvalidArgument, …) and forkd's message and code, so `ctr` prints the reason.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DaemonUnreachableError, ForkdError } from '@forkd/sdk';
import { statusOf } from '../../../src/shim/task.js';
import { CODE, TtrpcError } from '../../../src/shim/ttrpc.js';

test('forkd errors map to gRPC codes by their HTTP status, keeping message and code', () => {
  const cases: [ForkdError, number][] = [
    [new ForkdError('snapshot_not_found', 'no snapshot "x"'), CODE.notFound],
    [new ForkdError('bad_request', 'cpus must be from 1 to 64'), CODE.invalidArgument],
    [new ForkdError('capacity', 'busy'), CODE.unavailable],
    [new ForkdError('internal', 'boom'), CODE.unknown],
  ];
  for (const [e, code] of cases) {
    const s = statusOf(e) as TtrpcError;
    assert.equal(s.code, code, e.code);
    assert.equal(s.message, `forkd: ${e.message} (${e.code})`);
  }
});

test('an unreachable daemon is Unavailable and says what to do; ttrpc errors pass as they are', () => {
  const s = statusOf(
    new DaemonUnreachableError('the forkd daemon at unix:/x could not be reached'),
  );
  assert.equal((s as TtrpcError).code, CODE.unavailable);
  assert.match((s as TtrpcError).message, /start the node's forkd daemon/);
  const own = new TtrpcError(CODE.notFound, 'task t not found');
  assert.equal(statusOf(own), own);
});
