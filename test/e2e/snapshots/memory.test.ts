/**
 * Branch memory stored as a diff over the parent's (issue 11, "branch storage in proportion
 * to change"), end to end with real VMs (TCG), one source sandbox for the whole file:
 * copy and live branches of a forked sandbox are diffs a fraction of a full memory; every
 * fork of them (materialized) sees the value written in guest RAM before its branch; a chain
 * past the depth bound is compacted to a full memory in the background, content unchanged;
 * verify and fork catch a missing parent memory; a compacted child outlives its parents.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { rename } from 'node:fs/promises';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import { snapshotDir } from '../../../src/services/snapshots/files.js';
import { MEMORY_DIFF_FILE } from '../../../src/services/snapshots/memory.js';
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
let src: string;
const MiB = 1048576;
/** The branches made of the source: tag, mode, the value in its RAM at that instant. */
const steps = [
  { tag: 'm1', mode: 'copy', value: 'one' },
  { tag: 'm2', mode: 'live', value: 'two' },
  { tag: 'm3', mode: 'copy', value: 'three' },
] as const;

before(async () => {
  process.env.FORKD_MEMORY_CHAIN_MAX = '2'; // m3 is a third diff: compacted in the background
  home = await makeTestHome();
  // The daemon's default mode: a `--branch-mode copy` daemon denies QEMU spawn (live branch).
  s = await startServices(home);
  // Cold: the chain's depths count from a full memory, not from the boot snapshot's.
  const base = (await s.sandboxes.create({ image: 'busybox', memory_mib: 256, cold: true }, caller))
    .id;
  await s.branch.branch(base, { tag: 'base', mode: 'copy' }, caller);
  await s.sandboxes.kill(base);
  src = (await s.snapshots.fork({ snapshot: 'base', n: 1 }, caller)).sandboxes[0]?.id as string;
  for (const [i, step] of steps.entries()) {
    // /dev/shm is guest RAM: the value is in the memory file only, not on the disk layer.
    await sh(
      s,
      src,
      `echo ${step.value} > /dev/shm/value; dd if=/dev/urandom of=/dev/shm/r${i} bs=1M count=4 2>/dev/null`,
    );
    await s.branch.branch(src, { tag: step.tag, mode: step.mode }, caller);
  }
});

after(async () => {
  delete process.env.FORKD_MEMORY_CHAIN_MAX;
  await closeAndCheck(s, home);
});

async function valueIn(tag: string): Promise<string> {
  const [kid] = (await s.snapshots.fork({ snapshot: tag, n: 1 }, caller)).sandboxes;
  try {
    return (await sh(s, kid?.id as string, 'cat /dev/shm/value')).trim();
  } finally {
    await s.sandboxes.kill(kid?.id as string);
  }
}

test('copy and live branches store a diff over the parent, a fraction of a full memory', async () => {
  const base = await s.snapshots.get('base');
  assert.equal(base.memory?.kind, 'full');
  for (const [i, step] of steps.slice(0, 2).entries()) {
    const { memory } = await s.snapshots.get(step.tag);
    assert.equal(memory?.kind, 'diff', step.tag);
    assert.equal(memory?.parent, i === 0 ? 'base' : 'm1');
    assert.equal(memory?.logical_bytes, 256 * MiB);
    assert.equal(memory?.depth, i + 1);
    // ~4 MiB written between branches, plus what the guest kernel touched meanwhile.
    assert.ok(memory.stored_bytes >= 4 * MiB, `${step.tag} stores ${memory.stored_bytes}`);
    assert.ok(
      memory.stored_bytes < (base.memory?.stored_bytes ?? 0) / 3,
      `${step.tag}: ${memory.stored_bytes} stored vs ${base.memory?.stored_bytes} full`,
    );
  }
});

test('every fork of a diff branch sees the memory of its instant (materialized once)', async () => {
  for (const step of steps) assert.equal(await valueIn(step.tag), step.value, step.tag);
  const m2 = await s.snapshots.get('m2');
  assert.ok((m2.memory?.materialized_bytes ?? 0) > 0, 'no materialized memory is cached');
  assert.equal(await valueIn('m2'), 'two', 'a second fork from the cache');
  assert.equal(await sh(s, src, 'cat /dev/shm/value'), 'three\n', 'the source ran on');
});

test('a chain past the depth bound is compacted to a full memory, content unchanged', async () => {
  await s.snapshots.background;
  const { memory } = await s.snapshots.get('m3');
  assert.equal(memory?.kind, 'full');
  assert.equal(memory?.depth, 0);
  assert.ok(!existsSync(join(snapshotDir(home.paths, 'm3'), MEMORY_DIFF_FILE)));
  assert.equal((await s.snapshots.verify('m3')).ok, true);
  assert.equal(await valueIn('m3'), 'three');
});

test('verify and fork catch a missing parent memory', async () => {
  const diff = join(snapshotDir(home.paths, 'm1'), MEMORY_DIFF_FILE);
  await rename(diff, `${diff}.away`);
  try {
    const report = await s.snapshots.verify('m2');
    assert.equal(report.ok, false);
    assert.ok(
      report.problems.some((p) => /missing parent memory .*"m1"/.test(p.problem)),
      JSON.stringify(report.problems),
    );
    assert.equal((await s.snapshots.get('m2')).bootable, false);
    await assert.rejects(
      s.snapshots.fork({ snapshot: 'm2', n: 1 }, caller),
      (e) => isForkdError(e, 'snapshot_broken') && e.message.includes('missing parent memory'),
    );
  } finally {
    await rename(`${diff}.away`, diff);
  }
  assert.equal((await s.snapshots.verify('m2')).ok, true);
});

test('a compacted child stays forkable once its parents are removed', async () => {
  const flat = await s.snapshots.compact('m2', 'm2-flat', caller);
  assert.equal(flat.memory?.kind, 'full');
  await s.snapshots.remove('m1', { cascade: true }); // m1, m2, m3: the source is folded, not killed
  assert.deepEqual((await s.snapshots.list()).map((x) => x.tag).sort(), ['base', 'm2-flat']);
  assert.equal(await valueIn('m2-flat'), 'two');
  assert.equal((await s.snapshots.verify('m2-flat')).ok, true);
  assert.equal(await sh(s, src, 'cat /dev/shm/value'), 'three\n', 'the source still runs');
  await s.sandboxes.kill(src);
});
