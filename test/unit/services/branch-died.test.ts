/**
 * A branch whose source died says why and what to do (issue 29, item 5): the reason the
 * sandbox service recorded (an OOM kill says "out of memory") and the branch mode.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { diedDuringBranch } from '../../../src/services/branch/service.js';

test('a source OOM-killed mid live branch: the error names the cause, the mode and the remedies', () => {
  const oom =
    "out of memory: its QEMU reached the memory limit of 512M (limits.memory) and the host's OOM killer ended it; give it a larger limit or less guest RAM";
  const e = diedDuringBranch('sbx-0123456789ab', 'T', 'live', oom);
  assert.equal(e.code, 'sandbox_not_running');
  assert.match(e.message, /died during its live branch \(out of memory: .*512M/);
  assert.match(e.message, /nothing was made under "T"/);
  assert.match(e.message, /forkd update sbx-0123456789ab --memory-limit SIZE.*mode "copy"/);
  assert.equal(e.details?.reason, oom);
  assert.equal(e.details?.mode, 'live');
});

test('a source that died otherwise (reason unknown): the QEMU exit, and where to look', () => {
  const e = diedDuringBranch('sbx-0123456789ab', 'T', 'copy', null);
  assert.match(e.message, /died during its copy branch \(its QEMU exited\)/);
  assert.match(e.message, /forkd logs/);
  assert.doesNotMatch(e.message, /mode "copy"/);
});
