/**
 * What every branch test checks of children, whatever the capture mode: a guest logger
 * writes a counter to memory and a log line to disk; children of a branch must go on from
 * the one instant the branch was taken, memory and disk agreeing.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Paths } from '../../src/config.js';
import type { BranchOutcome } from '../../src/services/contracts.js';
import { snapshotDir, SNAPSHOT_FILES } from '../../src/services/snapshots/files.js';
import { run } from '../../src/util/exec.js';
import { caller, sh, type TestServices } from './services.js';

// Each line: counter value and the hostname of the VM that wrote it (forks get new names).
const LOGGER =
  'i=0; while true; do i=$((i+1)); echo $i > /tmp/cnt; read h < /proc/sys/kernel/hostname; echo "$i $h" >> /root/log.txt; sync; sleep 0.05; done';

/** Rewrites 24 MiB of guest memory (tmpfs) over and over, as fast as the guest can. */
export const MEMORY_WRITER =
  'dd if=/dev/urandom of=/dev/shm/w bs=1M count=24 2>/dev/null; while true; do cp /dev/shm/w /dev/shm/w2; done';

/** A booted sandbox running the logger, past its tenth line. */
export async function bootLogger(s: TestServices): Promise<string> {
  // Cold: its branches' lineage starts at the image, not at the image's boot snapshot.
  const sb = await s.sandboxes.create({ image: 'busybox', cold: true }, caller);
  await sh(s, sb.id, `(${LOGGER}) </dev/null >/dev/null 2>&1 &`);
  await sh(s, sb.id, 'while [ "$(cat /tmp/cnt 2>/dev/null)" -lt 10 ]; do sleep 0.1; done');
  return sb.id;
}

/** The log as read back from the disk, as [counter, hostname]: the page cache is dropped first. */
export async function logOf(s: TestServices, id: string): Promise<[number, string][]> {
  return parseLog(await sh(s, id, 'sync; echo 3 > /proc/sys/vm/drop_caches; cat /root/log.txt'));
}

function parseLog(text: string): [number, string][] {
  return text
    .trim()
    .split('\n')
    .map((l) => {
      const [n, h] = l.split(' ');
      return [Number(n), h as string];
    });
}

/** The counter runs 1, 2, 3… without a gap or repeat: memory and disk agree. */
export function assertContiguous(log: [number, string][], who: string): void {
  log.forEach(([n], i) => assert.equal(n, i + 1, `${who}: line ${i + 1} holds ${n}`));
}

/**
 * The log as the disk of snapshot `tag` holds it: the source's disk at the branch instant,
 * read from the host (the qcow2 chain made raw, its ext4 journal replayed, then debugfs).
 */
export async function logOnSnapshotDisk(p: Paths, tag: string): Promise<[number, string][]> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-instant-'));
  const raw = join(dir, 'disk.raw');
  try {
    const disk = join(snapshotDir(p, tag), SNAPSHOT_FILES.disk);
    await run('qemu-img', ['convert', '-O', 'raw', disk, raw]);
    // The guest's last commits may still be in the journal only: exit 1 = replayed.
    const fsck = spawnSync('e2fsck', ['-y', '-E', 'journal_only', raw], { encoding: 'utf8' });
    assert.ok(fsck.status === 0 || fsck.status === 1, `e2fsck: ${fsck.stderr}${fsck.stdout}`);
    await run('debugfs', ['-R', `dump /root/log.txt ${join(dir, 'log')}`, raw]);
    return parseLog(await readFile(join(dir, 'log'), 'utf8'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * The children of branch `res` of logger `src` started from the one instant the branch
 * was taken. That instant is on the branch snapshot's disk: the lines the source had
 * written (and synced) by then. Each child's log begins with exactly those lines, counts
 * on without a gap or repeat (its memory, the counter, is of that instant too), and its
 * own lines come after them; the source's log begins with them as well and goes on,
 * alone. No bound on lines after the instant that still carry the source's name: a child
 * writes some between its restore and forkd's hostname push, as many as the host's load
 * allows. A child started from another instant fails here: an earlier memory or disk
 * repeats or skips a counter, a later disk holds lines the snapshot's does not.
 */
export async function assertChildrenFromOneInstant(
  s: TestServices,
  p: Paths,
  src: string,
  res: BranchOutcome,
): Promise<void> {
  const kids = res.children?.sandboxes.map((k) => k.id) ?? [];
  assert.ok(kids.length > 0, JSON.stringify(res.children?.failed));
  const instant = await logOnSnapshotDisk(p, res.snapshot.tag);
  assertContiguous(instant, `the disk of ${res.snapshot.tag}`);
  assert.ok(instant.length >= 9, `only ${instant.length} lines on the snapshot's disk`);
  assert.ok(
    instant.every(([, h]) => h === src),
    'a line on the snapshot disk is not the source’s',
  );
  await new Promise((r) => setTimeout(r, 500));
  for (const kid of kids) {
    assert.equal((await s.sandboxes.get(kid)).snapshot, res.snapshot.tag);
    const log = await logOf(s, kid);
    assertContiguous(log, kid);
    assert.deepEqual(log.slice(0, instant.length), instant, `${kid} does not begin at the instant`);
    const own = log.findIndex(([, h]) => h === kid);
    assert.ok(own >= instant.length, `${kid} did not go on counting after the instant`);
    assert.ok(
      log.slice(own).every(([, h]) => h === kid),
      `${kid}: a line of another VM after its own`,
    );
  }
  const srcLog = await logOf(s, src);
  assertContiguous(srcLog, src);
  assert.deepEqual(
    srcLog.slice(0, instant.length),
    instant,
    'the source lost lines of the instant',
  );
  assert.ok(srcLog.length > instant.length, 'the source stopped counting after the branch');
  assert.ok(srcLog.every(([, h]) => h === src));
}
