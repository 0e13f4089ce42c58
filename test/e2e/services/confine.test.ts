/**
 * QEMU confined (docs/security.md), with one booted sandbox and one live branch of it: its
 * QEMU runs as a uid of its own with no capabilities under a seccomp filter; that uid cannot
 * open the branch's child's files nor the snapshot's; the live branch works under the
 * filter and its child is confined under another uid; the sandbox's info says all this.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
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
});

test('a live branch works under confinement; the child is confined under another uid, and neither can open the other’s files', async (t) => {
  const live = (await probeLive()).available;
  const res = await s!.branch.branch(src, { tag: 'conf', fork: 1 }, caller);
  if (live) assert.equal(res.mode, 'live');
  await assertChildrenFromOneInstant(s!, src, res);
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
  await Promise.all([kid, src].map((id) => s!.sandboxes.kill(id)));
});
