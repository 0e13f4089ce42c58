/**
 * Verify and the bootable check cover a snapshot's whole disk chain (real VMs, TCG): a
 * branch whose parent's layer is gone, or whose layer's header names another file than
 * the manifests record, is listed not bootable with the reason, fails verify naming the
 * layer, and a fork of it is `snapshot_broken` naming the layer (never `internal`).
 * And a branch never pins its source: removing it while the source runs folds its layer
 * into the source, which runs on with its data and branches again; `rmi --force` kills
 * the sandboxes forked from a snapshot, never a source that merely layers on it.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { copyFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { QEMU_IMG } from '../../../src/drivers/qemu/disk.js';
import { isForkdError } from '../../../src/errors.js';
import type { BranchOutcome } from '../../../src/services/contracts.js';
import { run } from '../../../src/util/exec.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';

let home: TestHome;
let s: TestServices;

before(async () => {
  home = await makeTestHome();
  s = await startServices(home, { branchMode: 'copy' });
});

after(() => closeAndCheck(s, home));

const disk = (tag: string) => join(home.paths.snapshots, tag, 'disk.qcow2');

async function assertBroken(tag: string, layer: RegExp): Promise<void> {
  const info = await s.snapshots.get(tag);
  assert.equal(info.bootable, false);
  assert.match(info.reason ?? '', layer);
  const v = await s.snapshots.verify(tag);
  assert.equal(v.ok, false);
  assert.ok(
    v.problems.some((p) => layer.test(p.problem)),
    JSON.stringify(v.problems),
  );
  await assert.rejects(
    s.snapshots.fork({ snapshot: tag, n: 1 }, caller),
    (e: unknown) => isForkdError(e) && e.code === 'snapshot_broken' && layer.test(e.message),
  );
}

test('a chain with a missing or substituted layer is broken: listed, verified, refused', async () => {
  await s.snapshots.create({ tag: 'base', image: 'busybox' }, caller);
  const [kid] = (await s.snapshots.fork({ snapshot: 'base', n: 1 }, caller)).sandboxes;
  const id = (kid as { id: string }).id;
  await s.branch.branch(id, { tag: 'top' }, caller);
  await s.sandboxes.kill(id);
  assert.deepEqual((await s.snapshots.verify('top')).problems, []);

  // The parent's layer is gone: `top`'s own files are intact, its chain is not.
  await rename(disk('base'), `${disk('base')}.away`);
  await assertBroken('top', new RegExp(`missing layer ${disk('base')}`));
  await rename(`${disk('base')}.away`, disk('base'));
  assert.equal((await s.snapshots.get('top')).bootable, true);

  // `top`'s header names another file than the parent the manifest records.
  const other = join(home.dir, 'other.qcow2');
  await copyFile(disk('base'), other);
  await run(QEMU_IMG, ['rebase', '-u', '-f', 'qcow2', '-F', 'qcow2', '-b', other, disk('top')]);
  await assertBroken('top', new RegExp(`names ${other}, but snapshot "top" records`));
  await run(QEMU_IMG, [
    'rebase',
    '-u',
    '-f',
    'qcow2',
    '-F',
    'qcow2',
    '-b',
    disk('base'),
    disk('top'),
  ]);

  // Whole again (a header rewrite changes the file: verify now says its checksum differs).
  assert.equal((await s.snapshots.get('top')).bootable, true);
  await s.snapshots.remove('base', { cascade: true });
});

const DROP = 'sync; echo 3 > /proc/sys/vm/drop_caches';

test('removing the newest branch while its source runs folds it in; the source runs on', async () => {
  const src = (await s.sandboxes.create({ image: 'busybox', cold: true }, caller)).id; // chains start at the image
  await sh(s, src, 'echo one > /root/1; sync');
  await s.branch.branch(src, { tag: 'b1' }, caller);
  await sh(s, src, 'echo two > /root/2; sync');
  await s.branch.branch(src, { tag: 'b2' }, caller);
  await sh(s, src, 'echo three > /root/3; sync');
  await s.snapshots.remove('b2', {}); // the newest: the source's disk layered on it
  assert.equal((await s.sandboxes.get(src)).state, 'running');
  assert.equal(await sh(s, src, `${DROP}; cat /root/1 /root/2 /root/3`), 'one\ntwo\nthree\n');
  const res = await s.branch.branch(src, { tag: 'b3', fork: 1 }, caller);
  assert.equal(res.snapshot.parent, 'b1');
  const kid = (res.children?.sandboxes[0] as { id: string }).id;
  assert.equal(await sh(s, kid, 'cat /root/1 /root/2 /root/3'), 'one\ntwo\nthree\n');
  assert.deepEqual((await s.snapshots.verify('b3')).problems, []);

  // --force kills the child forked from b3, not the source that layers on it.
  await s.snapshots.remove('b3', { force: true });
  assert.equal((await s.sandboxes.get(kid)).state, 'stopped');
  assert.equal((await s.sandboxes.get(src)).state, 'running');
  await s.snapshots.remove('b1', {}); // and the one below: the source now sits on its image
  assert.equal(await sh(s, src, `${DROP}; cat /root/1 /root/2 /root/3`), 'one\ntwo\nthree\n');
  const again = await s.branch.branch(src, { tag: 'b4', fork: 1 }, caller);
  assert.equal(again.snapshot.parent, null);
  const kid4 = (again.children?.sandboxes[0] as { id: string }).id;
  assert.equal(await sh(s, kid4, 'cat /root/3'), 'three\n');
  for (const id of [kid4, src]) await s.sandboxes.kill(id);
  await s.snapshots.remove('b4', {});
});

test('removing the newest branch while its source is branched again: they take turns, never internal', async () => {
  const src = (await s.sandboxes.create({ image: 'busybox', cold: true }, caller)).id; // chains start at the image
  await sh(s, src, 'echo one > /root/1; sync');
  const orders: string[] = [];
  // The branch starts with the removal, or a little after it: either may get the chain first.
  for (const [round, delayMs] of [0, 50, 300].entries()) {
    const old = `old${round}`;
    const next = `next${round}`;
    await s.branch.branch(src, { tag: old }, caller);
    await sh(s, src, `echo ${round} > /root/r; sync`);
    const [removed, branched] = await Promise.allSettled([
      s.snapshots.remove(old, {}),
      sleep(delayMs).then(() => s.branch.branch(src, { tag: next }, caller)),
    ]);
    if (branched.status === 'rejected')
      assert.fail(`the branch failed: ${String(branched.reason)}`);
    const parent = (branched as PromiseFulfilledResult<BranchOutcome>).value.snapshot.parent;
    if (removed.status === 'rejected') {
      // The branch went first: its snapshot is built on `old`, which is now in use.
      assert.ok(isForkdError(removed.reason, 'snapshot_in_use'), String(removed.reason));
      assert.equal(parent, old);
      orders.push('branch first');
    } else {
      // The removal went first: the source was folded onto what `old` sat on.
      assert.notEqual(parent, old);
      await assert.rejects(s.snapshots.get(old), (e) => isForkdError(e, 'snapshot_not_found'));
      orders.push('removal first');
    }
    assert.deepEqual((await s.snapshots.verify(next)).problems, []);
    assert.equal(await sh(s, src, `${DROP}; cat /root/1 /root/r`), `one\n${round}\n`);
    await s.snapshots.remove(next, {});
    if (removed.status === 'rejected') await s.snapshots.remove(old, {});
    assert.equal(await sh(s, src, `${DROP}; cat /root/1 /root/r`), `one\n${round}\n`);
  }
  console.log(`# orders: ${orders.join(', ')}`);
  await s.sandboxes.kill(src);
});

test('removing the snapshot a branched fork came from answers at once: in use, or with --cascade gone', async () => {
  await s.snapshots.create({ tag: 'root2', image: 'busybox' }, caller);
  const [kid] = (await s.snapshots.fork({ snapshot: 'root2', n: 1 }, caller)).sandboxes;
  const id = (kid as { id: string }).id;
  // The child is forked from root2 and now layers on kid-b: it depends on both (held once).
  await s.branch.branch(id, { tag: 'kid-b' }, caller);
  await assert.rejects(s.snapshots.remove('root2', {}), (e) => isForkdError(e, 'snapshot_in_use'));
  await s.snapshots.remove('root2', { force: true, cascade: true });
  assert.equal((await s.sandboxes.get(id)).state, 'stopped');
  const tags = (await s.snapshots.list()).map((x) => x.tag);
  assert.ok(!tags.includes('root2') && !tags.includes('kid-b'), tags.join(', '));
});
