/**
 * QEMU confinement's pure parts: the -sandbox option, the uid of a sandbox's directory,
 * FORKD_CONFINE and FORKD_QEMU_JAIL, what a VM's jail is given, and what /proc says of a
 * QEMU (docs/security.md).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  confineFromEnv,
  jailArgs,
  parseConfinement,
  seccompOption,
  VM_UID_BASE,
  vmUid,
} from '../../../src/drivers/qemu/confine.js';

const STATUS = (seccomp: number, cap: string) =>
  `Name:\tqemu-system-x86\nUid:\t1879048300\t1879048300\t1879048300\t1879048300\nCapEff:\t${cap}\nNoNewPrivs:\t1\nSeccomp:\t${seccomp}\n`;
const argv = (...a: string[]) => ['qemu-system-x86_64', '-M', 'microvm', ...a].join('\0') + '\0';

test('the filter denies obsolete calls and resource control; spawn follows the branch mode', () => {
  assert.equal(
    seccompOption(true),
    'on,obsolete=deny,elevateprivileges=allow,spawn=allow,resourcecontrol=deny',
  );
  assert.match(seccompOption(false), /spawn=deny/);
});

test('a directory inode gives a uid in the range, the same every time', () => {
  assert.equal(vmUid(12), VM_UID_BASE + 12);
  assert.equal(vmUid(12), vmUid(12));
  assert.ok(vmUid(2 ** 40 + 5) < 2 ** 31);
});

test('FORKD_CONFINE=off, 0, false or no turns it off; anything else keeps it on', () => {
  for (const v of ['off', 'OFF', '0', 'false', 'no'])
    assert.equal(confineFromEnv({ FORKD_CONFINE: v }), false);
  for (const v of [undefined, 'on', '1']) assert.equal(confineFromEnv({ FORKD_CONFINE: v }), true);
});

test('what /proc says: uid, filter, its option, spawn, capabilities', () => {
  const c = parseConfinement(STATUS(2, '0000000000000000'), argv('-sandbox', seccompOption(true)));
  assert.deepEqual(c, {
    uid: 1879048300,
    seccomp: true,
    sandbox: seccompOption(true),
    spawn: true,
    capabilities: '0000000000000000',
    noNewPrivs: true,
  });
  const denied = parseConfinement(STATUS(2, '0'), argv('-sandbox', seccompOption(false)));
  assert.equal(denied.spawn, false);
  // A filter that is not QEMU's own -sandbox: nothing is known of it, so no spawn.
  assert.equal(parseConfinement(STATUS(2, '0'), argv()).spawn, false);
  const none = parseConfinement(STATUS(0, '000001fffeffffff'), argv());
  assert.deepEqual([none.seccomp, none.sandbox, none.spawn], [false, null, true]);
});

test('FORKD_QEMU_JAIL=off leaves out only the jail', () => {
  assert.equal(confineFromEnv({ FORKD_QEMU_JAIL: 'off' }, 'FORKD_QEMU_JAIL'), false);
  assert.equal(confineFromEnv({ FORKD_QEMU_JAIL: 'off' }), true);
});

test('a jail gets its directory and memory file read-write, kernel files read-only, its disk chain', () => {
  const dir = '/h/sandboxes/sbx-1';
  const disk = `${dir}/overlay.qcow2`;
  const boot = { kernel: '/h/kernel/vmlinux', initramfs: '/h/kernel/initramfs' };
  assert.deepEqual(jailArgs({ dir, memPath: '/dev/zero', disk, boot }, null), [
    ...['--jail', '--rw', dir, '--ro', boot.kernel, '--ro', boot.initramfs],
    ...['--chain', disk],
  ]);
  const memPath = '/h/snapshots/base/memory';
  assert.deepEqual(jailArgs({ dir, memPath, disk }, null), [
    ...['--jail', '--rw', dir, '--rw', memPath, '--chain', disk],
  ]);
  // The empty capstone QEMU loads instead of /usr's is bound read-only too.
  assert.deepEqual(jailArgs({ dir, memPath, disk }, '/r/native/build/qemu-libs'), [
    ...['--jail', '--rw', dir, '--rw', memPath, '--ro', '/r/native/build/qemu-libs'],
    ...['--chain', disk],
  ]);
});
