/**
 * QEMU tuning's pure parts (docs/idle.md "Leaner children"): the TCG buffer cap on the
 * command line, the daemon's flags and environment, and the merging launcher's prefix.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  accelArg,
  buildQemuArgs,
  DEVICE_SET,
  deviceSetOf,
} from '../../../src/drivers/qemu/cmdline.js';
import {
  DEFAULT_TB_MIB,
  launcherPrefix,
  parseMerge,
  parseTbMiB,
  QEMU_EXEC_BINARY,
  qemuEnv,
  qemuLibsDir,
  qemuLibPath,
  QEMU_LIBS_DIR,
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

test("a VM's device set reaches -M and is read back from its argv; absent is the old set", () => {
  const machine = (deviceSet?: number) => {
    const args = buildQemuArgs({ ...SPEC, accel: 'tcg', deviceSet });
    return { m: args[args.indexOf('-M') + 1]!, back: deviceSetOf(args) };
  };
  assert.equal(DEVICE_SET, 2);
  assert.match(machine(2).m, /^microvm,.*,ioapic2=off$/);
  assert.equal(machine(2).back, 2);
  // A snapshot or hibernation from before the device set was recorded restores as it was made.
  assert.doesNotMatch(machine(undefined).m, /ioapic2/);
  assert.equal(machine(undefined).back, 1);
  assert.equal(machine(1).back, 1);
});

test('flags and environment parse; bad values name the flag', () => {
  assert.equal(parseTbMiB('48'), 48);
  assert.equal(parseTbMiB('default'), null);
  for (const bad of ['0', '2000', '1.5', 'lots']) {
    assert.throws(() => parseTbMiB(bad), /--tcg-tb-mib must be/);
  }
  assert.equal(parseMerge('same-layout'), 'same-layout');
  assert.throws(() => parseMerge('yes'), /--merge-memory must be one of off, on, same-layout/);
  assert.deepEqual(tuningFromEnv({}), {
    tbMiB: DEFAULT_TB_MIB,
    merge: 'off',
    hugePages: false,
    disassembler: false,
  });
  assert.deepEqual(
    tuningFromEnv({
      FORKD_TCG_TB_MIB: 'default',
      FORKD_MERGE_MEMORY: 'on',
      FORKD_QEMU_HUGE_PAGES: 'on',
      FORKD_QEMU_DISASSEMBLER: 'on',
    }),
    { tbMiB: null, merge: 'on', hugePages: true, disassembler: true },
  );
  assert.throws(() => tuningFromEnv({ FORKD_MERGE_MEMORY: 'all' }), /FORKD_MERGE_MEMORY/);
});

test('the launcher turns huge pages off unless asked, and merging on when asked', () => {
  const t = { tbMiB: null, hugePages: false, disassembler: false } as const;
  assert.deepEqual(launcherPrefix({ ...t, merge: 'off' }), [QEMU_EXEC_BINARY, '--no-thp', '--']);
  assert.deepEqual(launcherPrefix({ ...t, merge: 'on', hugePages: true }), [
    QEMU_EXEC_BINARY,
    '--merge',
    '--',
  ]);
  assert.deepEqual(launcherPrefix({ ...t, merge: 'same-layout' }), [
    QEMU_EXEC_BINARY,
    '--same-layout',
    '--no-thp',
    '--',
  ]);
  assert.deepEqual(launcherPrefix({ ...t, merge: 'off', hugePages: true }), []);
});

test("QEMU's environment keeps the daemon's and adds one malloc arena", () => {
  assert.equal(qemuEnv({ PATH: '/bin' }, []).GLIBC_TUNABLES, 'glibc.malloc.arena_max=1');
  assert.equal(qemuEnv({ PATH: '/bin' }, []).PATH, '/bin');
  assert.equal(qemuEnv({ PATH: '/bin' }, []).LD_LIBRARY_PATH, undefined);
  assert.equal(
    qemuEnv({ GLIBC_TUNABLES: 'glibc.pthread.rseq=0' }, []).GLIBC_TUNABLES,
    'glibc.pthread.rseq=0:glibc.malloc.arena_max=1',
  );
});

test('QEMU finds the stubs first, and the empty capstone unless asked for the real one', () => {
  assert.equal(qemuEnv({}, ['/r/libs']).LD_LIBRARY_PATH, '/r/libs');
  assert.equal(
    qemuEnv({ LD_LIBRARY_PATH: '/opt/lib' }, ['/r/libs']).LD_LIBRARY_PATH,
    '/r/libs:/opt/lib',
  );
  const off = { tbMiB: 64, merge: 'off', hugePages: false, disassembler: false } as const;
  assert.equal(qemuLibsDir(), QEMU_LIBS_DIR, 'the stubs are built by npm run build');
  assert.deepEqual(qemuLibPath(off), [`${QEMU_LIBS_DIR}/capstone`, QEMU_LIBS_DIR]);
  assert.deepEqual(qemuLibPath({ ...off, disassembler: true }), [QEMU_LIBS_DIR]);
  assert.equal(qemuLibsDir('/nonexistent'), null, 'not built: the system libraries');
  assert.deepEqual(qemuLibPath(off, null), []);
});
