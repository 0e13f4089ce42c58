/**
 * Branch end to end with real VMs (TCG): memory and disk captured from one instant while
 * the source keeps running, a page-by-page compare of the captured memory against the
 * source's RAM while it is stopped, repeated branches, branches of branch children, and
 * chains: rmi refuses to orphan, --cascade removes exactly a subtree, compact flattens.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { compareRegion } from '../../src/drivers/qemu/capture.js';
import { isForkdError } from '../../src/errors.js';
import { makeTestHome, type TestHome } from '../helpers/home.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../helpers/services.js';

let home: TestHome;
let s: TestServices;
/** Differing pages found by every compare made while a branch's source was stopped. */
const compares: { pages: number; differing: number }[] = [];

// Each line: counter value and the hostname of the VM that wrote it (forks get new names).
const LOGGER =
  'i=0; while true; do i=$((i+1)); echo $i > /tmp/cnt; read h < /proc/sys/kernel/hostname; echo "$i $h" >> /root/log.txt; sync; sleep 0.05; done';
const DIRTIER =
  'dd if=/dev/urandom of=/dev/shm/dirty bs=1M count=24 2>/dev/null; while true; do cp /dev/shm/dirty /dev/shm/dirty2; done';

before(async () => {
  home = await makeTestHome();
  s = await startServices(home, {
    whileStopped: async (region, memoryFile) => {
      compares.push(
        (await compareRegion(region, memoryFile)) as { pages: number; differing: number },
      );
    },
  });
});

after(() => closeAndCheck(s, home));

async function bootLogger(): Promise<string> {
  const sb = await s.sandboxes.create({ image: 'busybox' }, caller);
  await sh(s, sb.id, `(${LOGGER}) </dev/null >/dev/null 2>&1 &`);
  await sh(s, sb.id, 'while [ "$(cat /tmp/cnt 2>/dev/null)" -lt 10 ]; do sleep 0.1; done');
  return sb.id;
}

/** Lines of a log as [counter, hostname]. */
/** The log as read back from the disk: the clean page cache is dropped first. */
async function logOf(id: string): Promise<[number, string][]> {
  const text = await sh(s, id, 'sync; echo 3 > /proc/sys/vm/drop_caches; cat /root/log.txt');
  return text
    .trim()
    .split('\n')
    .map((l) => {
      const [n, h] = l.split(' ');
      return [Number(n), h as string];
    });
}

/** The counter runs 1, 2, 3… without a gap or repeat: memory and disk agree. */
function assertContiguous(log: [number, string][], who: string) {
  log.forEach(([n], i) => assert.equal(n, i + 1, `${who}: line ${i + 1} holds ${n}`));
}

test('branch: source keeps running; children start at the branch instant, memory and disk alike', async () => {
  const src = await bootLogger();
  const before = compares.length;
  const res = await s.snapshots.branch(src, { tag: 'b1', fork: 3 }, caller);
  assert.ok(res.pause_ms > 0 && res.captured_bytes > 0);
  assert.equal(compares.length, before + 1);
  assert.equal(compares.at(-1)?.differing, 0, 'captured memory differs from the stopped RAM');
  const kids = res.children?.sandboxes.map((k) => k.id) ?? [];
  assert.equal(kids.length, 3, JSON.stringify(res.children?.failed));
  await new Promise((r) => setTimeout(r, 500));
  const cut: number[] = [];
  for (const kid of kids) {
    const log = await logOf(kid);
    assertContiguous(log, kid);
    const inherited = log.filter(([, h]) => h === src);
    const own = log.filter(([, h]) => h === kid);
    assert.ok(own.length > 0, `${kid} did not go on counting`);
    assert.equal(
      own[0]?.[0],
      (inherited.at(-1)?.[0] ?? 0) + 1,
      `${kid} diverged at the wrong line`,
    );
    cut.push(inherited.length);
  }
  // All children resume from one instant. A line written between the restore and forkd's
  // hostname push (the guest runs from the restore on) still carries the source's name, so
  // the splits may differ by such a line or two, never by more.
  assert.ok(Math.max(...cut) - Math.min(...cut) <= 2, `children split at lines ${cut.join(', ')}`);
  const srcLog = await logOf(src);
  assertContiguous(srcLog, src);
  assert.ok(srcLog.length > (cut[0] as number), 'the source stopped counting after the branch');
  assert.ok(srcLog.every(([, h]) => h === src));
  await Promise.all([...kids, src].map((id) => s.sandboxes.kill(id)));
});

test('the capture matches the stopped RAM page for page: booted, forked, idle and writing', async () => {
  const idle = (await s.sandboxes.create({ image: 'busybox' }, caller)).id;
  const busy = (await s.sandboxes.create({ image: 'busybox' }, caller)).id;
  await sh(s, busy, `(${DIRTIER}) </dev/null >/dev/null 2>&1 &`);
  await new Promise((r) => setTimeout(r, 1500));
  await s.snapshots.branch(idle, { tag: 'ref-idle' }, caller);
  await s.snapshots.branch(busy, { tag: 'ref-busy' }, caller);
  const [forked] = (await s.snapshots.fork({ snapshot: 'ref-busy', n: 1 }, caller)).sandboxes;
  await s.snapshots.branch(forked?.id as string, { tag: 'ref-forked' }, caller);
  const last = compares.slice(-3);
  assert.deepEqual(
    last.map((c) => c.differing),
    [0, 0, 0],
  );
  assert.ok(last.every((c) => c.pages === 65536));
  await Promise.all([idle, busy, forked?.id as string].map((id) => s.sandboxes.kill(id)));
  for (const t of ['ref-forked', 'ref-busy', 'ref-idle']) await s.snapshots.remove(t, {});
});

test('five branches in a row, and a branch of a branch child: all fork correctly', async () => {
  const src = await bootLogger();
  for (let i = 1; i <= 5; i++) {
    await sh(s, src, `echo ${i} > /root/gen.txt`);
    await s.snapshots.branch(src, { tag: `gen${i}` }, caller);
  }
  for (let i = 1; i <= 5; i++) {
    const [kid] = (await s.snapshots.fork({ snapshot: `gen${i}`, n: 1 }, caller)).sandboxes;
    assert.equal(await sh(s, kid?.id as string, 'cat /root/gen.txt'), `${i}\n`);
    assertContiguous(await logOf(kid?.id as string), `gen${i}`);
    await s.sandboxes.kill(kid?.id as string);
  }
  const info = await s.snapshots.get('gen5');
  assert.deepEqual(info.ancestors, ['gen4', 'gen3', 'gen2', 'gen1']);
  assert.equal(info.depth, 4);
  const [child] = (await s.snapshots.fork({ snapshot: 'gen2', n: 1 }, caller)).sandboxes;
  await sh(s, child?.id as string, 'echo grandchild > /root/gc.txt');
  await s.snapshots.branch(child?.id as string, { tag: 'gen2-child' }, caller);
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
  assertContiguous(await logOf(kid?.id as string), 'gen3-flat');
  await s.sandboxes.kill(kid?.id as string);
  await s.snapshots.remove('gen2', { cascade: true });
  const left = (await s.snapshots.list()).map((x) => x.tag).sort();
  assert.deepEqual(left, ['b1', 'gen1', 'gen3-flat']);
  const [again] = (await s.snapshots.fork({ snapshot: 'gen3-flat', n: 1 }, caller)).sandboxes;
  assert.equal(await sh(s, again?.id as string, 'cat /root/gen.txt'), '3\n');
  await s.sandboxes.kill(again?.id as string);
});
