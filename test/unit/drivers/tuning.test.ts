/**
 * QEMU tuning's pure parts (docs/idle.md "Leaner children"): the TCG buffer cap on the
 * command line, the daemon's flags and environment, and the merging launcher's prefix.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { accelArg, buildQemuArgs } from '../../../src/drivers/qemu/cmdline.js';
import {
  DEFAULT_TB_MIB,
  launcherPrefix,
  parseMerge,
  parseTbMiB,
  QEMU_EXEC_BINARY,
  tuningFromEnv,
} from '../../../src/drivers/qemu/tuning.js';

const SPEC = { dir: '/d', memoryMiB: 256, cpus: 1, memPath: '/dev/zero', disk: '/d/o.qcow2' };

test('the TCG buffer cap reaches -accel; KVM and an uncapped TCG get none', () => {
  assert.equal(accelArg({ accel: 'tcg', tbMiB: 32 }), 'tcg,tb-size=32');
  assert.equal(accelArg({ accel: 'tcg', tbMiB: null }), 'tcg');
  assert.equal(accelArg({ accel: 'kvm', tbMiB: 32 }), 'kvm');
  const args = buildQemuArgs({ ...SPEC, accel: 'tcg', tbMiB: 64 });
  assert.equal(args[args.indexOf('-accel') + 1], 'tcg,tb-size=64');
});

test('flags and environment parse; bad values name the flag', () => {
  assert.equal(parseTbMiB('48'), 48);
  assert.equal(parseTbMiB('default'), null);
  for (const bad of ['0', '2000', '1.5', 'lots']) {
    assert.throws(() => parseTbMiB(bad), /--tcg-tb-mib must be/);
  }
  assert.equal(parseMerge('same-layout'), 'same-layout');
  assert.throws(() => parseMerge('yes'), /--merge-memory must be one of off, on, same-layout/);
  assert.deepEqual(tuningFromEnv({}), { tbMiB: DEFAULT_TB_MIB, merge: 'off' });
  assert.deepEqual(tuningFromEnv({ FORKD_TCG_TB_MIB: 'default', FORKD_MERGE_MEMORY: 'on' }), {
    tbMiB: null,
    merge: 'on',
  });
  assert.throws(() => tuningFromEnv({ FORKD_MERGE_MEMORY: 'all' }), /FORKD_MERGE_MEMORY/);
});

test('merging starts QEMU through the launcher; off starts it directly', () => {
  assert.deepEqual(launcherPrefix({ tbMiB: null, merge: 'off' }), []);
  assert.deepEqual(launcherPrefix({ tbMiB: null, merge: 'on' }), [QEMU_EXEC_BINARY, '--']);
  assert.deepEqual(launcherPrefix({ tbMiB: null, merge: 'same-layout' }), [
    QEMU_EXEC_BINARY,
    '--same-layout',
    '--',
  ]);
});
