/**
 * The node's allow-list of snapshots pods may fork (services/pod-policy.ts): tags,
 * patterns and registry prefixes; sandboxes not made for containerd are never affected.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isForkdError } from '../../../src/errors.js';
import { PodPolicy } from '../../../src/services/pod-policy.js';

const POD = { 'containerd.io/namespace': 'k8s.io' };

test('tags, tag patterns and registry prefixes are allowed; the rest is not', () => {
  const p = PodPolicy.parse('warm, agent-*  ,registry.test:5000/team/');
  assert.deepEqual(p.allowed, ['warm', 'agent-*', 'registry.test:5000/team/']);
  for (const ok of ['warm', 'agent-py', 'agent-', 'registry.test:5000/team/py:v1']) {
    assert.equal(p.allows(ok), true, ok);
  }
  for (const no of ['warm2', 'xwarm', 'py-agent-x', 'registry.test:5000/other/py:v1', 'agent.']) {
    assert.equal(p.allows(no), false, no);
  }
});

test('a pattern is not a regular expression', () => {
  assert.equal(PodPolicy.parse('a.c').allows('abc'), false);
  assert.equal(PodPolicy.parse('a.c').allows('a.c'), true);
});

test('a containerd sandbox naming a snapshot off the list is refused with snapshot_not_allowed', () => {
  const p = PodPolicy.parse('warm');
  assert.doesNotThrow(() => p.check('warm', POD));
  assert.throws(
    () => p.check('secret', POD),
    (e) =>
      isForkdError(e, 'snapshot_not_allowed') &&
      /may not fork snapshot "secret" \(allowed: warm\)/.test(e.message),
  );
});

test('without a list pods may fork nothing; other sandboxes are not affected', () => {
  const none = PodPolicy.parse(undefined);
  assert.throws(() => none.check('warm', POD), /allowed: none/);
  assert.doesNotThrow(() => none.check('warm', { team: 'a' }));
  assert.doesNotThrow(() => none.check('warm', undefined));
});
