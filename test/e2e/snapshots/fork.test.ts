/**
 * Snapshots and fork-from-warm end to end with real VMs (TCG here): a parent warmed with a
 * file and a running counter is captured; its forks start warm, isolated from each other,
 * with their own identity and a correct clock; broken and unknown snapshots are refused.
 * The parent runs in a cgroup with the daemon's default limits while it warms up.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import { readManifest } from '../../../src/services/snapshots/files.js';
import { configureTuning, vmTuning } from '../../../src/drivers/qemu/tuning.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { cgroupState, homeCgroup, type CgroupState } from '../../helpers/cgroups.js';
import { AUTO_DEFAULTS, QEMU_OVERHEAD_MIB } from '../../../src/services/limits.js';
import { DEFAULTS as RESOURCE_DEFAULTS } from '../../../src/contract/rules.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';

let home: TestHome;
let s: TestServices;
let counterAtCapture = 0;

const COUNTER =
  'echo $$ > /tmp/counter.pid; i=0; while true; do i=$((i+1)); echo $i > /tmp/cnt; sleep 0.05; done';

/** The daemon's defaults, one changed as `--default-pids 300` would. */
const DEFAULTS = { ...AUTO_DEFAULTS, pids: 300 };
/** The cgroup of the snapshot's parent VM, seen while it warmed up. */
let warmUp: Promise<{ name: string; state: CgroupState }> | undefined;

async function onlyCgroup(): Promise<{ name: string; state: CgroupState }> {
  const parent = await homeCgroup(home.paths.home);
  assert.ok(parent, 'this host has cgroups');
  const names = await parent.children();
  assert.equal(names.length, 1, `one cgroup while the parent warms up: ${names.join(', ')}`);
  return { name: names[0] as string, state: await cgroupState(parent, names[0] as string) };
}

before(async () => {
  home = await makeTestHome();
  s = await startServices(home, { limitDefaults: DEFAULTS });
  await s.snapshots.create(
    {
      tag: 'warm',
      warm: ['echo warmed > /root/warm.txt', 'echo in-memory > /tmp/mem.txt'],
      start: [`sh -c '${COUNTER}'`],
      wait_for: 'test "$(cat /tmp/cnt 2>/dev/null)" -ge 5',
    },
    caller,
    (m) => {
      if (!m.startsWith('warm:') || warmUp) return;
      warmUp = onlyCgroup();
      warmUp.catch(() => undefined); // asserted in its test
    },
  );
  counterAtCapture = 5;
});

after(() => closeAndCheck(s, home));

const forkN = async (n: number) => {
  const r = await s.snapshots.fork({ snapshot: 'warm', n }, caller);
  assert.deepEqual(r.failed, [], JSON.stringify(r.failed));
  assert.equal(r.sandboxes.length, n);
  return r.sandboxes.map((sb) => sb.id);
};

test("snapshot create's parent VM ran in a cgroup with the daemon's default memory and pids limits, gone after", async () => {
  assert.ok(warmUp, 'the warm-up was not seen');
  const { name, state } = await warmUp;
  assert.equal(state.procs.length, 1, 'its QEMU was in it');
  assert.deepEqual(
    { memoryBytes: state.memoryBytes, cpu: state.cpu, pids: state.pids },
    {
      memoryBytes: (RESOURCE_DEFAULTS.memoryMiB + QEMU_OVERHEAD_MIB) * 1024 * 1024,
      cpu: null, // no quota while its guest boots (create.ts: its clock would lag)
      pids: 300,
    },
  );
  const parent = await homeCgroup(home.paths.home);
  assert.equal((await parent?.children())?.includes(name), false, 'its cgroup is gone');
});

test('every fork sees the warm-up file and the counter process already running', async () => {
  const ids = await forkN(2);
  for (const id of ids) {
    assert.equal(await sh(s, id, 'cat /root/warm.txt /tmp/mem.txt'), 'warmed\nin-memory\n');
    const pid = (await sh(s, id, 'cat /tmp/counter.pid')).trim();
    await sh(s, id, `kill -0 ${pid}`); // the same process, not a restarted one
    const first = Number(await sh(s, id, 'cat /tmp/cnt'));
    assert.ok(first >= counterAtCapture, `counter ${first} restarted below ${counterAtCapture}`);
    await new Promise((r) => setTimeout(r, 600));
    const later = Number(await sh(s, id, 'cat /tmp/cnt'));
    assert.ok(later > first, `counter did not advance: ${first} → ${later}`);
    const row = await s.sandboxes.get(id);
    assert.equal(row.snapshot, 'warm');
    assert.match(row.parent ?? '', /^sbx-/);
  }
  await Promise.all(ids.map((id) => s.sandboxes.kill(id)));
});

test('10 children at once all answer, isolated from each other and from the snapshot', async () => {
  const before = await s.snapshots.verify('warm');
  assert.equal(before.ok, true);
  const ids = await forkN(10);
  await Promise.all(
    ids.map((id) => sh(s, id, `echo ${id} > /root/mine.txt; echo ${id} > /tmp/mine.txt; sync`)),
  );
  for (const id of ids) {
    assert.equal(await sh(s, id, 'cat /root/mine.txt /tmp/mine.txt'), `${id}\n${id}\n`);
  }
  const fresh = await forkN(1);
  assert.equal(
    await sh(
      s,
      fresh[0] as string,
      'ls /root/mine.txt /tmp/mine.txt 2>&1 | grep -c "No such" || true',
    ),
    '2\n',
  );
  await Promise.all([...ids, ...fresh].map((id) => s.sandboxes.kill(id)));
  const afterRun = await s.snapshots.verify('warm');
  assert.deepEqual(afterRun.problems, [], 'the snapshot files changed while children ran');
});

/**
 * The guest clock was set from the host's at the fork (`forkedAt`, ms), not left at the
 * capture instant: never before the fork, never ahead of the host. A TCG guest on a loaded
 * host runs behind real time after that, so how far behind it reads is not asserted.
 */
function assertClockSetAt(guestS: number, forkedAt: number): void {
  const [from, to] = [Math.floor(forkedAt / 1000) - 1, Math.ceil(Date.now() / 1000) + 1];
  assert.ok(guestS >= from && guestS <= to, `guest clock ${guestS} is not in [${from}, ${to}]`);
}

test('children get distinct random streams and hostnames, and the host clock', async () => {
  await new Promise((r) => setTimeout(r, 4000)); // the snapshot's clock is now 4 s stale
  const forkedAt = Date.now();
  const ids = await forkN(3);
  const seen = new Set<string>();
  for (const id of ids) {
    const [uuid, host, date] = (
      await sh(s, id, 'cat /proc/sys/kernel/random/uuid; hostname; date +%s')
    )
      .trim()
      .split('\n');
    assert.equal(host, id);
    seen.add(uuid as string);
    assertClockSetAt(Number(date), forkedAt);
  }
  assert.equal(seen.size, 3, 'two children share a random stream');
  await Promise.all(ids.map((id) => s.sandboxes.kill(id)));
});

test('a pool serves forks from pre-started VMMs and refills itself', async () => {
  const state = await s.snapshots.setPool('warm', 2);
  assert.equal(state.size, 2);
  await s.snapshots.pool.settled('warm');
  assert.equal(s.snapshots.pool.state('warm').ready, 2);
  // Pool VMs are not sandboxes: what they take is in the snapshot's answer (their cgroups).
  const { pool } = await s.snapshots.get('warm');
  assert.equal(pool.ready, 2);
  assert.ok((pool.memory_bytes ?? 0) > 2 * 1024 * 1024, `pool memory ${pool.memory_bytes}`);
  const ids = await forkN(2);
  for (const id of ids) assert.equal(await sh(s, id, 'cat /root/warm.txt'), 'warmed\n');
  await s.snapshots.pool.settled('warm');
  assert.equal(s.snapshots.pool.state('warm').ready, 2);
  await s.snapshots.setPool('warm', 0);
  assert.equal(s.snapshots.pool.state('warm').ready, 0);
  await Promise.all(ids.map((id) => s.sandboxes.kill(id)));
});

test('a pre-warmed pool hands out paused, already-run VMs that resume as fresh forks', async () => {
  const state = await s.snapshots.setPool('warm', 2, { prewarm: true });
  assert.deepEqual([state.size, state.prewarm], [2, true]);
  await s.snapshots.pool.settled('warm');
  assert.equal(s.snapshots.pool.state('warm').ready, 2);
  const forkedAt = Date.now();
  const ids = await forkN(2);
  const uuids = new Set<string>();
  for (const id of ids) {
    const [warm, host, uuid, date] = (
      await sh(s, id, 'cat /root/warm.txt; hostname; cat /proc/sys/kernel/random/uuid; date +%s')
    )
      .trim()
      .split('\n');
    assert.equal(warm, 'warmed');
    assert.equal(host, id);
    uuids.add(uuid as string);
    assertClockSetAt(Number(date), forkedAt);
    const pid = (await sh(s, id, 'cat /tmp/counter.pid')).trim();
    await sh(s, id, `kill -0 ${pid}`);
  }
  assert.equal(uuids.size, 2);
  await s.snapshots.setPool('warm', 0);
  await Promise.all(ids.map((id) => s.sandboxes.kill(id)));
});

test('a child forked with merging on is open to KSM, its TCG buffer capped, and works', async () => {
  const before = vmTuning();
  configureTuning({ merge: 'same-layout', tbMiB: 48 });
  try {
    const [id] = await forkN(1);
    const pid = (await s.sandboxes.get(id as string)).pid as number;
    const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
    assert.equal(argv[argv.indexOf('-accel') + 1], 'tcg,tb-size=48');
    assert.match(await readFile(`/proc/${pid}/ksm_stat`, 'utf8'), /ksm_merge_any: yes/);
    assert.equal((await readFile(`/proc/${pid}/personality`, 'utf8')).trim(), '00040000');
    assert.equal(await sh(s, id as string, 'cat /tmp/mem.txt'), 'in-memory\n');
    await s.sandboxes.kill(id as string);
  } finally {
    configureTuning(before);
  }
});

test('a child under the default tuning has no huge pages and one malloc arena in its QEMU', async () => {
  const [id] = await forkN(1);
  const pid = (await s.sandboxes.get(id as string)).pid as number;
  // What the density bench measured: -5.8 MiB and -1.2 MiB per idle child.
  assert.match(await readFile(`/proc/${pid}/status`, 'utf8'), /^THP_enabled:\s+0$/m);
  const environ = (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0');
  assert.ok(environ.some((e) => /^GLIBC_TUNABLES=.*glibc\.malloc\.arena_max=1/.test(e)));
  // Device set 2 and the empty libpmem (-0.7 and -0.43 MiB): the snapshot records the set.
  const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
  assert.match(argv[argv.indexOf('-M') + 1]!, /,ioapic2=off/);
  assert.equal((await readManifest(home.paths, 'warm')).device_set, 2);
  const maps = await readFile(`/proc/${pid}/maps`, 'utf8');
  assert.match(maps, /qemu-libs\/libpmem\.so\.1/);
  assert.doesNotMatch(maps, /libcrypto/);
  assert.equal(await sh(s, id as string, 'cat /tmp/mem.txt'), 'in-memory\n');
  await s.sandboxes.kill(id as string);
});

test('unknown tags, bad n and snapshots in use are refused with catalog errors', async () => {
  await assert.rejects(s.snapshots.fork({ snapshot: 'nope', n: 1 }, caller), (e) =>
    isForkdError(e, 'snapshot_not_found'),
  );
  for (const n of [0, 101, 1.5]) {
    await assert.rejects(s.snapshots.fork({ snapshot: 'warm', n }, caller), (e) =>
      isForkdError(e, 'bad_request'),
    );
  }
  await assert.rejects(s.snapshots.get('../etc'), (e) => isForkdError(e, 'bad_request'));
  const [id] = await forkN(1);
  await assert.rejects(
    s.snapshots.remove('warm', {}),
    (e) => isForkdError(e, 'snapshot_in_use') && e.message.includes(id as string),
  );
  await s.sandboxes.kill(id as string);
});

test('a snapshot whose memory file is gone is not bootable, and fork names the file', async () => {
  await s.snapshots.create({ tag: 'broken', warm: ['true'] }, caller);
  const memory = join(home.paths.snapshots, 'broken', 'memory');
  await unlink(memory);
  const info = await s.snapshots.get('broken');
  assert.equal(info.bootable, false);
  assert.match(info.reason ?? '', /memory/);
  await assert.rejects(
    s.snapshots.fork({ snapshot: 'broken', n: 1 }, caller),
    (e) =>
      isForkdError(e, 'snapshot_not_bootable') && e.status === 409 && e.message.includes(memory),
  );
  await s.snapshots.remove('broken', {});
  await assert.rejects(s.snapshots.get('broken'), (e) => isForkdError(e, 'snapshot_not_found'));
});

test('a snapshot of another format version is listed unbootable and refused, as COMPATIBILITY.md says', async () => {
  const file = join(home.paths.snapshots, 'warm', 'manifest.json');
  const original = await readFile(file, 'utf8');
  try {
    for (const [version, who] of [
      [0, 'an older'],
      [4, 'a newer'],
    ] as const) {
      await writeFile(file, JSON.stringify({ ...JSON.parse(original), format_version: version }));
      const info = await s.snapshots.get('warm');
      assert.equal(info.bootable, false);
      assert.match(
        info.reason ?? '',
        new RegExp(`format ${version} is not 1–3 \\(written by ${who} forkd\\)`),
      );
      await assert.rejects(
        s.snapshots.fork({ snapshot: 'warm', n: 1 }, caller),
        (e) => isForkdError(e, 'snapshot_not_bootable') && e.message.includes('recreate it'),
      );
    }
  } finally {
    await writeFile(file, original);
  }
  assert.equal((await s.snapshots.get('warm')).bootable, true, 'the real format boots again');
});

test('a failing warm-up command aborts the create and leaves nothing under the tag', async () => {
  await assert.rejects(
    s.snapshots.create({ tag: 'bad-warm', warm: ['echo oops >&2; exit 3'] }, caller),
    (e) => isForkdError(e, 'bad_request') && e.message.includes('oops'),
  );
  await assert.rejects(s.snapshots.get('bad-warm'), (e) => isForkdError(e, 'snapshot_not_found'));
  const { readdir } = await import('node:fs/promises');
  assert.deepEqual(
    (await readdir(home.paths.snapshots)).filter((n) => n !== 'warm'),
    [],
  );
});
