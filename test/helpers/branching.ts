/**
 * What every branch test checks of children, whatever the capture mode: a guest logger
 * writes a counter to memory and a log line to disk; children of a branch must go on from
 * the one instant the branch was taken, memory and disk agreeing.
 */
import assert from 'node:assert/strict';
import type { BranchOutcome } from '../../src/services/contracts.js';
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
export function assertContiguous(log: [number, string][], who: string): void {
  log.forEach(([n], i) => assert.equal(n, i + 1, `${who}: line ${i + 1} holds ${n}`));
}

/**
 * The children of branch `res` of logger `src` each inherited a contiguous log and went on
 * counting from the line after the source's last one; all split from one instant; the
 * source itself counts on, alone.
 */
export async function assertChildrenFromOneInstant(
  s: TestServices,
  src: string,
  res: BranchOutcome,
): Promise<void> {
  const kids = res.children?.sandboxes.map((k) => k.id) ?? [];
  assert.ok(kids.length > 0, JSON.stringify(res.children?.failed));
  await new Promise((r) => setTimeout(r, 500));
  const cut: number[] = [];
  for (const kid of kids) {
    const log = await logOf(s, kid);
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
  const srcLog = await logOf(s, src);
  assertContiguous(srcLog, src);
  assert.ok(srcLog.length > (cut[0] as number), 'the source stopped counting after the branch');
  assert.ok(srcLog.every(([, h]) => h === src));
}
