/**
 * QEMU confined (docs/security.md), with one booted sandbox and one live branch of it: its
 * QEMU runs as a uid of its own with no capabilities under a seccomp filter; that uid cannot
 * open the branch's child's files nor the snapshot's; the live branch works under the
 * filter and its child is confined under another uid; the sandbox's info says all this.
 * Each QEMU is jailed: seen through /proc/PID/root, its root holds its own directory but not
 * the host's /etc/shadow, /root, nor another sandbox's directory, and it has a mount and an
 * IPC namespace of its own; a live branch (a new disk layer opened after start) and a fork
 * of the jailed sandbox work, and so does the jailed source afterwards.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { probeLive } from '../../../src/drivers/qemu/live.js';
import { assertChildrenFromOneInstant, bootLogger } from '../../helpers/branching.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { caller, closeAndCheck, startServices, type TestServices } from '../../helpers/services.js';

let home: TestHome;
let s: TestServices | undefined;
let src: string;

before(async () => {
  home = await makeTestHome();
  s = await startServices(home);
  src = await bootLogger(s);
});

after(() => closeAndCheck(s, home));

function status(pid: number): Record<string, string> {
  const lines = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n');
  return Object.fromEntries(lines.map((l) => l.split(/:\s*/, 2) as [string, string]));
}

/** Whether a process with `uid`'s uid and gid (and no other group) can read `file`. */
function readableBy(uid: number, file: string): boolean {
  const r = spawnSync('head', ['-c', '1', file], { uid, gid: uid, stdio: 'ignore' });
  return r.status === 0;
}

const root = process.getuid?.() === 0;

/** An exec's output (base64 on the wire), trimmed. */
function text(b64: string): string {
  return Buffer.from(b64, 'base64').toString('utf8').trim();
}

/** Whether `path` (a host path) exists as QEMU `pid` sees its file system. */
function seenBy(pid: number, path: string): boolean {
  return existsSync(`/proc/${pid}/root${path}`);
}

/** The namespace `kind` (mnt, ipc, pid) of a process, as its /proc link names it. */
function ns(pid: number | 'self', kind: string): string {
  return readlinkSync(`/proc/${pid}/ns/${kind}`);
}

/** A jailed QEMU sees its own directory, and none of the host's secrets nor `others`. */
function assertJailed(pid: number, own: string, others: string[]): void {
  assert.ok(seenBy(pid, join(own, 'console.log')), 'its own directory');
  assert.ok(existsSync('/etc/shadow') && existsSync('/root'), 'the host has them');
  for (const p of ['/etc/shadow', '/root', '/home', '/etc/passwd', ...others]) {
    assert.equal(seenBy(pid, p), false, `${p} is not in its root`);
  }
  assert.notEqual(ns(pid, 'mnt'), ns('self', 'mnt'), 'a mount namespace of its own');
  assert.notEqual(ns(pid, 'ipc'), ns('self', 'ipc'), 'an IPC namespace of its own');
}

test('the QEMU runs as its own uid, no capabilities, seccomp filter on', async () => {
  const sb = await s!.sandboxes.get(src);
  const st = status(sb.pid!);
  assert.equal(st.Seccomp, '2');
  assert.equal(st.NoNewPrivs, '1');
  assert.match(st.CapEff ?? '', /^0+$/);
  const dir = join(home.paths.sandboxes, src);
  if (root) {
    const uid = statSync(dir).uid;
    assert.notEqual(uid, 0);
    assert.deepEqual(st.Uid?.split(/\s+/), [uid, uid, uid, uid].map(String));
    assert.equal(statSync(dir).mode & 0o777, 0o700);
  }
  assert.equal(sb.confinement?.seccomp, true);
  assert.equal(sb.confinement?.capabilities, st.CapEff);
  assert.match(sb.confinement?.sandbox ?? '', /^on,obsolete=deny,.*resourcecontrol=deny$/);
  if (root) assert.deepEqual(sb.confinement?.namespaces, ['mount', 'ipc']);
});

test('a live branch works under confinement; the child is confined under another uid, and neither can open the other’s files', async (t) => {
  const live = (await probeLive()).available;
  const res = await s!.branch.branch(src, { tag: 'conf', fork: 1 }, caller);
  if (live) assert.equal(res.mode, 'live');
  await assertChildrenFromOneInstant(s!, home.paths, src, res);
  if (!root) return t.skip('not root: QEMU keeps the daemon’s uid');
  const kid = res.children!.sandboxes[0]!.id;
  const [mine, theirs] = [src, kid].map((id) => join(home.paths.sandboxes, id));
  const [me, them] = [mine, theirs].map((d) => statSync(d!).uid) as [number, number];
  assert.notEqual(me, them);
  assert.equal(status((await s!.sandboxes.get(kid)).pid!).Uid?.split(/\s+/)[1], String(them));
  assert.ok(readableBy(me, join(mine!, 'console.log')), 'its own console');
  for (const f of ['console.log', 'overlay.qcow2', 'qemu.log']) {
    assert.equal(readableBy(me, join(theirs!, f)), false, `the child's ${f}`);
  }
  const snap = join(home.paths.snapshots, 'conf', 'memory');
  assert.equal(readableBy(me, snap), false, "the snapshot's memory");
  // Jailed, both: neither sees the other's directory; the child sees the memory it maps.
  const [srcPid, kidPid] = await Promise.all(
    [src, kid].map(async (id) => (await s!.sandboxes.get(id)).pid!),
  );
  assertJailed(srcPid!, mine!, [theirs!, snap]);
  assertJailed(kidPid!, theirs!, [mine!]);
  assert.ok(seenBy(kidPid!, snap), 'the child maps the snapshot’s memory');
  // The source goes on after the branch in its jail: it writes to the layer it opened
  // after start, and branches again onto another one.
  const after = await s!.sandboxes.exec(src, {
    argv: ['sh', '-c', 'echo on > /after && cat /after'],
  });
  assert.equal(text(after.stdout), 'on');
  const again = await s!.branch.branch(src, { tag: 'conf2', fork: 1 }, caller);
  const kid2 = again.children!.sandboxes[0]!.id;
  const read = await s!.sandboxes.exec(kid2, { argv: ['cat', '/after'] });
  assert.equal(text(read.stdout), 'on');
  await Promise.all([kid, kid2, src].map((id) => s!.sandboxes.kill(id)));
});
