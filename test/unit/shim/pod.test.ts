/**
 * How the shim tells a pod's tasks apart (pod.ts): CRI's annotations make a sandbox
 * container the pod's VM and an app container a process in it; a task without them (ctr) is
 * a sandbox of its own.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { roleOf } from '../../../src/shim/pod.js';

const TYPE = 'io.kubernetes.cri.container-type';
const POD = 'io.kubernetes.cri.sandbox-id';

test("a pod's sandbox container makes the pod; its app containers join it", () => {
  assert.deepEqual(roleOf({ [TYPE]: 'sandbox', [POD]: 'p1' }, 'p1'), { kind: 'pod', pod: 'p1' });
  assert.deepEqual(roleOf({ [TYPE]: 'container', [POD]: 'p1' }, 'c1'), {
    kind: 'container',
    pod: 'p1',
  });
});

test('a task without CRI annotations (ctr) is a task of its own', () => {
  assert.deepEqual(roleOf({}, 't1'), { kind: 'task' });
  assert.deepEqual(roleOf({ 'forkd.dev/snapshot': 'warm' }, 't1'), { kind: 'task' });
  // An app container that does not name its pod cannot join one.
  assert.deepEqual(roleOf({ [TYPE]: 'container' }, 'c1'), { kind: 'task' });
});
