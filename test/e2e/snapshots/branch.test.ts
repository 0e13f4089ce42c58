/**
 * Branch (mode copy) end to end with real VMs (TCG): memory and disk captured from one instant while
 * the source keeps running, a page-by-page compare of the captured memory against the
 * source's RAM while it is stopped, repeated branches, branches of branch children, and
 * chains: rmi refuses to orphan, --cascade removes exactly a subtree, compact flattens.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import {
  assertChildrenFromOneInstant,
  assertContiguous,
  bootLogger,
  logOf,
  MEMORY_WRITER,
} from '../../helpers/branching.js';
import {
  differingPages,
  dumpRam,
  memoryOf,
  removeReference,
  type RamReference,
} from '../../helpers/ram.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';

let home: TestHome;
let s: TestServices;
/** The source's RAM read while it was stopped, for every branch (mode copy; live: live.test.ts). */
const refs: RamReference[] = [];
/** Only the first tests compare (a dump is 256 MiB). */
let dumping = true;

before(async () => {
  home = await makeTestHome();
  s = await startServices(home, {
    branchMode: 'copy',
    whileStopped: async (region) => {
      if (dumping) refs.push(await dumpRam(region, join(home.dir, `ref-${refs.length}`)));
    },
  });
});

/** Pages of the branch's memory (a diff, materialized as forks map it) unlike the stopped RAM. */
async function differing(ref: RamReference, tag: string): Promise<number> {
  const n = await differingPages(ref, await memoryOf(home.paths, tag));
  await removeReference(ref);
  return n;
}

after(() => closeAndCheck(s, home));

test('branch: source keeps running; children start at the branch instant, memory and disk alike', async () => {
  const src = await bootLogger(s);
  const before = refs.length;
  const res = await s.branch.branch(src, { tag: 'b1', fork: 3 }, caller);
  assert.ok(res.pause_ms > 0 && res.captured_bytes > 0);
  assert.equal(refs.length, before + 1);
  assert.equal(
    await differing(refs.at(-1)!, 'b1'),
    0,
    'captured memory differs from the stopped RAM',
  );
  const kids = res.children?.sandboxes.map((k) => k.id) ?? [];
  assert.equal(kids.length, 3, JSON.stringify(res.children?.failed));
  await assertChildrenFromOneInstant(s, home.paths, src, res);
  await Promise.all([...kids, src].map((id) => s.sandboxes.kill(id)));
});

test('the capture matches the stopped RAM page for page: booted, forked, idle and writing', async () => {
  const idle = (await s.sandboxes.create({ image: 'busybox' }, caller)).id;
  const busy = (await s.sandboxes.create({ image: 'busybox' }, caller)).id;
  await sh(s, busy, `(${MEMORY_WRITER}) </dev/null >/dev/null 2>&1 &`);
  await new Promise((r) => setTimeout(r, 1500));
  await s.branch.branch(idle, { tag: 'ref-idle' }, caller);
  await s.branch.branch(busy, { tag: 'ref-busy' }, caller);
  const [forked] = (await s.snapshots.fork({ snapshot: 'ref-busy', n: 1 }, caller)).sandboxes;
  await s.branch.branch(forked?.id as string, { tag: 'ref-forked' }, caller);
  const last = refs.slice(-3);
  assert.ok(last.every((r) => r.length === 256 << 20));
  const tags = ['ref-idle', 'ref-busy', 'ref-forked'];
  assert.deepEqual(
    await Promise.all(last.map((r, i) => differing(r, tags[i] as string))),
    [0, 0, 0],
  );
  await Promise.all([idle, busy, forked?.id as string].map((id) => s.sandboxes.kill(id)));
  for (const t of ['ref-forked', 'ref-busy', 'ref-idle']) await s.snapshots.remove(t, {});
});

test('five branches in a row, and a branch of a branch child: all fork correctly', async () => {
  dumping = false;
  const src = await bootLogger(s);
  for (let i = 1; i <= 5; i++) {
    await sh(s, src, `echo ${i} > /root/gen.txt`);
    await s.branch.branch(src, { tag: `gen${i}` }, caller);
  }
  for (let i = 1; i <= 5; i++) {
    const [kid] = (await s.snapshots.fork({ snapshot: `gen${i}`, n: 1 }, caller)).sandboxes;
    assert.equal(await sh(s, kid?.id as string, 'cat /root/gen.txt'), `${i}\n`);
    assertContiguous(await logOf(s, kid?.id as string), `gen${i}`);
    await s.sandboxes.kill(kid?.id as string);
  }
  const info = await s.snapshots.get('gen5');
  assert.deepEqual(info.ancestors, ['gen4', 'gen3', 'gen2', 'gen1']);
  assert.equal(info.depth, 4);
  const [child] = (await s.snapshots.fork({ snapshot: 'gen2', n: 1 }, caller)).sandboxes;
  await sh(s, child?.id as string, 'echo grandchild > /root/gc.txt');
  await s.branch.branch(child?.id as string, { tag: 'gen2-child' }, caller);
  const [gc] = (await s.snapshots.fork({ snapshot: 'gen2-child', n: 1 }, caller)).sandboxes;
  assert.equal(await sh(s, gc?.id as string, 'cat /root/gen.txt /root/gc.txt'), '2\ngrandchild\n');
  assert.deepEqual((await s.snapshots.get('gen2-child')).ancestors, ['gen2', 'gen1']);
  await Promise.all([src, child?.id as string, gc?.id as string].map((id) => s.sandboxes.kill(id)));
});

test('chains: rmi refuses to orphan, compact flattens, cascade removes exactly the subtree', async () => {
  await assert.rejects(
    s.snapshots.remove('gen3', {}),
    (e) => isForkdError(e, 'snapshot_in_use') && e.message.includes('gen4'),
  );
  const flat = await s.snapshots.compact('gen3', 'gen3-flat', caller);
  assert.equal(flat.parent, null);
  assert.equal(flat.depth, 0);
  const [kid] = (await s.snapshots.fork({ snapshot: 'gen3-flat', n: 1 }, caller)).sandboxes;
  assert.equal(await sh(s, kid?.id as string, 'cat /root/gen.txt'), '3\n');
  assertContiguous(await logOf(s, kid?.id as string), 'gen3-flat');
  await s.sandboxes.kill(kid?.id as string);
  await s.snapshots.remove('gen2', { cascade: true });
  const left = (await s.snapshots.list()).map((x) => x.tag).sort();
  assert.deepEqual(left, ['b1', 'gen1', 'gen3-flat']);
  const [again] = (await s.snapshots.fork({ snapshot: 'gen3-flat', n: 1 }, caller)).sandboxes;
  assert.equal(await sh(s, again?.id as string, 'cat /root/gen.txt'), '3\n');
  await s.sandboxes.kill(again?.id as string);
});
