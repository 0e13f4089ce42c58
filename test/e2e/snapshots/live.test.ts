/**
 * Live branch end to end with real VMs (TCG): the source is stopped only to make its QEMU
 * fork (a copy-on-write view of guest RAM) and the written pages are copied from that
 * frozen fork after it resumed. Checked here: the memory (a diff, materialized) equals the RAM read while
 * the source was stopped, page for page, over 4 branches each of a booted and of a forked
 * sandbox writing memory as fast as they can, and of a 2-vCPU one; children start from the branch instant;
 * memory use returns after each copy; no fork, zombie or copier is left, even when the
 * copier is killed mid-copy. (The daemon killed mid-copy: daemon.test.ts.)
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { RamRegion } from '../../../src/drivers/qemu/capture.js';
import { snapshotDir, SNAPSHOT_FILES } from '../../../src/services/snapshots/files.js';
import { MEMORY_DIFF_FILE } from '../../../src/services/snapshots/memory.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import {
  assertChildrenFromOneInstant,
  bootLogger,
  MEMORY_WRITER,
} from '../../helpers/branching.js';
import {
  childrenOf,
  differingPages,
  differingReport,
  dumpRam,
  memoryOf,
  ramIsDontFork,
  removeReference,
  runningCopiers,
  sharedAnonKiB,
  statusKiB,
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
/** The source's RAM as read while it was stopped, for each branch; and its mapping. */
const refs: { ref: RamReference; region: RamRegion }[] = [];

const BRANCHES = 4;
const MiB = 1024;

before(async () => {
  home = await makeTestHome();
  s = await startServices(home, {
    whileStopped: async (region) => {
      refs.push({ ref: await dumpRam(region, join(home.dir, `ref-${refs.length}`)), region });
    },
  });
});

after(async () => {
  delete process.env.FORKD_LIVE_THROTTLE_MS;
  await closeAndCheck(s, home);
});

function memoryFile(tag: string): string {
  return join(snapshotDir(home.paths, tag), SNAPSHOT_FILES.memory);
}

/**
 * Nothing of the live copy is left: no fork of QEMU (live or zombie), no copier, and no
 * page of QEMU's memory still shared with anything (its memory use is what it was).
 */
async function assertNothingLeft(qemuPid: number): Promise<void> {
  assert.deepEqual(await childrenOf(qemuPid), [], 'QEMU has a child left');
  assert.deepEqual(await runningCopiers(), [], 'a copier still runs');
  assert.equal(await sharedAnonKiB(qemuPid), 0, 'QEMU memory is still shared with a fork');
}

async function startWriter(id: string): Promise<void> {
  await sh(s, id, `(${MEMORY_WRITER}) </dev/null >/dev/null 2>&1 &`);
  await new Promise((r) => setTimeout(r, 1500));
}

test('live branch: children start at the branch instant, memory and disk alike', async () => {
  const src = await bootLogger(s);
  const res = await s.branch.branch(src, { tag: 'live-log', fork: 3, mode: 'live' }, caller);
  assert.equal(res.mode, 'live');
  assert.ok(res.pause_ms > 0 && res.captured_bytes > 0);
  assert.equal(await differingPages(refs.at(-1)!.ref, await memoryOf(home.paths, 'live-log')), 0);
  await assertChildrenFromOneInstant(s, home.paths, src, res);
  const kids = res.children?.sandboxes.map((k) => k.id) ?? [];
  await Promise.all([...kids, src].map((id) => s.sandboxes.kill(id)));
  await s.snapshots.remove('live-log', { force: true });
});

/** BRANCHES live branches of a writing sandbox: each compared, cleaned up, memory noted. */
async function branchRepeatedly(id: string, kind: string): Promise<void> {
  const qemu = (await s.sandboxes.lease(id)).vm.pid;
  const growth: number[] = [];
  const differing: string[] = [];
  for (let i = 0; i < BRANCHES; i++) {
    const before = await statusKiB(qemu, 'RssAnon');
    const tag = `${kind}-${i}`;
    const res = await s.branch.branch(id, { tag, mode: 'live' }, caller);
    growth.push((await statusKiB(qemu, 'RssAnon')) - before);
    const { ref, region } = refs.at(-1)!;
    assert.equal(region.pid, qemu);
    assert.ok(res.captured_bytes > 0, `${tag}: nothing captured`);
    const diff = join(snapshotDir(home.paths, tag), MEMORY_DIFF_FILE);
    differing.push(await differingReport(ref, await memoryOf(home.paths, tag), diff));
    await removeReference(ref);
    await assertNothingLeft(qemu);
    assert.ok(await ramIsDontFork(region), 'guest RAM is no longer MADV_DONTFORK');
  }
  assert.deepEqual(differing, new Array<string>(BRANCHES).fill('none'), `${kind}: differing pages`);
  // Pages the source wrote during a copy were duplicated (copy-on-write); once the frozen
  // fork is gone they are freed. The writer itself may touch a few new guest pages.
  const median = [...growth].sort((a, b) => a - b)[growth.length >> 1] as number;
  assert.ok(median < 4 * MiB, `${kind}: RssAnon grew by ${growth.join(', ')} KiB per branch`);
  console.log(`# ${kind}: RssAnon change per live branch (KiB): ${growth.join(' ')}`);
}

test(`${BRANCHES} live branches of a booted sandbox writing memory: 0 differing pages each`, async () => {
  const id = (await s.sandboxes.create({ image: 'busybox' }, caller)).id;
  await startWriter(id);
  await branchRepeatedly(id, 'booted');
  assert.equal(await sh(s, id, 'echo alive'), 'alive\n');
  await s.sandboxes.kill(id);
});

test(`${BRANCHES} live branches of a forked sandbox writing memory: 0 differing pages each`, async () => {
  const last = `booted-${BRANCHES - 1}`;
  const [kid] = (await s.snapshots.fork({ snapshot: last, n: 1 }, caller)).sandboxes;
  const id = kid?.id as string;
  assert.match(await sh(s, id, 'ps'), /cp \/dev\/shm\/w/, 'the writer runs on in the fork');
  await branchRepeatedly(id, 'forked');
  await s.sandboxes.kill(id);
  await s.snapshots.remove('booted-0', { cascade: true });
  assert.deepEqual(
    (await s.snapshots.list()).map((x) => x.tag),
    [],
  );
});

test('2 vCPUs both writing (one QEMU thread each): live branches match the stopped RAM', async () => {
  const id = (await s.sandboxes.create({ image: 'busybox', cpus: 2 }, caller)).id;
  const second = MEMORY_WRITER.replaceAll('/dev/shm/w', '/dev/shm/v');
  await sh(
    s,
    id,
    `(${MEMORY_WRITER}) </dev/null >/dev/null 2>&1 & (${second}) </dev/null >/dev/null 2>&1 &`,
  );
  await new Promise((r) => setTimeout(r, 2000));
  for (let i = 0; i < 3; i++) {
    await s.branch.branch(id, { tag: `smp-${i}`, mode: 'live' }, caller);
    assert.equal(await differingPages(refs.at(-1)!.ref, await memoryOf(home.paths, `smp-${i}`)), 0);
    await removeReference(refs.at(-1)!.ref);
    await assertNothingLeft((await s.sandboxes.lease(id)).vm.pid);
  }
  await s.sandboxes.kill(id);
  await s.snapshots.remove('smp-0', { cascade: true });
});

test('copier killed mid-copy: the branch fails, the source runs on, nothing is left', async () => {
  const id = (await s.sandboxes.create({ image: 'busybox' }, caller)).id;
  const vm = (await s.sandboxes.lease(id)).vm;
  process.env.FORKD_LIVE_THROTTLE_MS = '100'; // 0.1 s per 2 MiB: the copy takes seconds
  try {
    const res = await s.branch.branch(id, { tag: 'cut', mode: 'live', no_wait: true }, caller);
    assert.equal(res.snapshot.state, 'writing');
    const [copier] = await runningCopiers();
    assert.ok(copier, 'no copier running after the answer');
    assert.ok((await childrenOf(vm.pid)).length === 1, 'the frozen fork should exist mid-copy');
    assert.ok((await sharedAnonKiB(vm.pid)) > 0, 'mid-copy, guest RAM is shared with the fork');
    process.kill(copier.pid, 'SIGKILL');
    for (let i = 0; i < 100 && (await s.snapshots.get('cut')).state === 'writing'; i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    delete process.env.FORKD_LIVE_THROTTLE_MS;
  }
  const cut = await s.snapshots.get('cut');
  assert.equal(cut.state, 'failed');
  assert.match(cut.reason ?? '', /live copy failed.*SIGKILL/);
  assert.ok(!existsSync(memoryFile('cut')), 'a half-written memory file is left');
  const staging = (await readdir(home.paths.snapshots)).filter((n) => n.startsWith('.staging'));
  assert.deepEqual(staging, []);
  await assertNothingLeft(vm.pid);
  assert.equal(await sh(s, id, 'echo alive'), 'alive\n');
  await sh(s, id, 'echo after > /root/after.txt; sync');
  const again = await s.branch.branch(id, { tag: 'after-cut', mode: 'live' }, caller);
  assert.equal(await differingPages(refs.at(-1)!.ref, await memoryOf(home.paths, 'after-cut')), 0);
  assert.ok(again.pause_ms > 0);
  // The failed branch's disk layer was folded back: the chain outlives the source.
  await s.sandboxes.kill(id);
  const [kid] = (await s.snapshots.fork({ snapshot: 'after-cut', n: 1 }, caller)).sandboxes;
  assert.equal(await sh(s, kid?.id as string, 'cat /root/after.txt'), 'after\n');
  await s.sandboxes.kill(kid?.id as string);
  await s.snapshots.remove('after-cut', {});
  await s.snapshots.remove('cut', { force: true }).catch(() => undefined);
});
