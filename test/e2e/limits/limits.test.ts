/**
 * Resource limits end to end (docs/limits.md): a real daemon, real microVMs (TCG), real
 * cgroups (v1 on our hosts, v2 where mounted). What a user checks: the limits in `info`
 * (SDK and CLI) and `ps`; the cgroup's quota and its usage over a window of a CPU hog; a
 * memory hog stopped at the host limit and reported as such while another sandbox runs on;
 * a branch's children inheriting the source's limits, a fork overriding them, a pooled
 * QEMU getting the fork's; a daemon crash re-adopting a cgroup and sweeping a stray one;
 * no cgroup left after a kill or after the file.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox, Snapshot, type SandboxCreateOptions } from '@forkd/sdk';
import { forkd } from '../../helpers/cli.js';
import { cgroupsLeft, homeCgroup } from '../../helpers/cgroups.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';

let home: TestHome;
let daemon: DaemonProcess | undefined;
let url: string;
const MiB = 1024 * 1024;

before(async () => {
  home = await makeTestHome();
  daemon = await startDaemon(home);
  url = daemon.url;
});

after(async () => {
  try {
    const left = await Sandbox.list({ url }).catch(() => []);
    await Promise.allSettled(left.map((s) => Sandbox.kill(s.id, { url })));
    await daemon?.stop();
    await assertNoLeftovers(home); // no QEMU, dir or cgroup
  } finally {
    await home.cleanup();
  }
});

/** A failure carries the tail of the daemon's log (why a sandbox died, say). */
function logged(fn: () => Promise<void>): () => Promise<void> {
  return async () => {
    try {
      await fn();
    } catch (e) {
      if (e instanceof Error) e.message += `\n--- daemon log:\n${daemon?.output().slice(-3000)}`;
      throw e;
    }
  };
}

const create = (opts: SandboxCreateOptions) => Sandbox.create({ url, image: 'busybox', ...opts });

/** A sandbox's cgroup directory in one hierarchy (v2: the only one). */
async function cgroupDir(id: string, hierarchy: 'cpu' | 'memory' | 'pids'): Promise<string> {
  const parent = await homeCgroup(home.paths.home);
  assert.ok(parent, 'this host has no cgroups');
  return join(parent.dirs()[hierarchy] as string, id);
}

async function cgroupFile(
  id: string,
  hierarchy: 'cpu' | 'memory' | 'pids',
  v1: string,
  v2: string,
) {
  const parent = await homeCgroup(home.paths.home);
  const file = parent?.layout.version === 'v2' ? v2 : v1;
  return (await readFile(join(await cgroupDir(id, hierarchy), file), 'utf8')).trim();
}

/** The CPU quota in cores the kernel holds for a sandbox. */
async function quotaCores(id: string): Promise<number> {
  const text = await cgroupFile(id, 'cpu', 'cpu.cfs_quota_us', 'cpu.max');
  return Number(text.split(' ')[0]) / 100_000;
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

test(
  'a CPU hog is held to its 0.5-core quota; the limits show in info and ps and change while it runs',
  logged(async () => {
    const sbx = await create({ limits: { cpu: 0.5, memory: '512M', pids: 128 } });
    try {
      assert.deepEqual(sbx.info.limits, {
        memoryBytes: 512 * MiB,
        cpu: 0.5,
        pids: 128,
        cgroup: sbx.info.limits?.cgroup,
      });
      assert.ok(sbx.info.limits?.cgroup, 'limits are enforced on this host');
      assert.equal(await quotaCores(sbx.id), 0.5);
      assert.equal(
        Number(await cgroupFile(sbx.id, 'memory', 'memory.limit_in_bytes', 'memory.max')),
        512 * MiB,
      );
      assert.equal(await cgroupFile(sbx.id, 'pids', 'pids.max', 'pids.max'), '128');
      const qemu = await cgroupFile(sbx.id, 'cpu', 'cgroup.procs', 'cgroup.procs');
      assert.deepEqual(qemu.split('\n').map(Number), [sbx.info.pid], 'QEMU is in its cgroup');

      const hog = sbx.commands.run('timeout 6 sh -c "while :; do :; done"; true');
      await sleep(1500); // the hog is spinning
      const before = (await Sandbox.connect(sbx.id, { url })).info.usage;
      const t0 = Date.now();
      await sleep(4000);
      const afterHog = (await Sandbox.connect(sbx.id, { url })).info.usage;
      const seconds = (Date.now() - t0) / 1000;
      assert.ok(before && afterHog, 'a running sandbox reports its usage');
      const cores = (afterHog.cpuSeconds - before.cpuSeconds) / seconds;
      assert.ok(cores <= 0.6, `the hog used ${cores.toFixed(2)} cores under a 0.5 quota`);
      assert.ok(cores >= 0.05, `the hog ran (${cores.toFixed(2)} cores)`);
      // On a busy host the hog may get less than its quota: only then is it not throttled.
      if (cores >= 0.45) {
        assert.ok(afterHog.throttledSeconds > before.throttledSeconds, 'the quota throttled it');
      }
      await hog;

      const info = await forkd(['info', sbx.id, '--json'], {
        env: { ...home.env, FORKD_URL: url },
      });
      assert.equal(info.code, 0, info.stderr);
      const wire = JSON.parse(info.stdout.toString()) as { limits: unknown; usage: unknown };
      assert.deepEqual(wire.limits, {
        memory_bytes: 512 * MiB,
        cpu: 0.5,
        pids: 128,
        cgroup: sbx.info.limits?.cgroup,
      });
      assert.ok(wire.usage, 'info shows usage');
      const ps = await forkd(['ps'], { env: { ...home.env, FORKD_URL: url } });
      assert.match(ps.stdout.toString(), /mem 512 MiB, cpu 0\.5, pids 128/);

      // Changed while it runs (PATCH): the kernel's values follow at once, the rest stay.
      const changed = await sbx.setLimits({ cpu: 0.25, pids: 96 });
      assert.deepEqual([changed.limits?.cpu, changed.limits?.pids], [0.25, 96]);
      assert.equal(await quotaCores(sbx.id), 0.25);
      assert.equal(await cgroupFile(sbx.id, 'pids', 'pids.max', 'pids.max'), '96');
      assert.equal(
        Number(await cgroupFile(sbx.id, 'memory', 'memory.limit_in_bytes', 'memory.max')),
        512 * MiB,
      );
      assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n');
    } finally {
      await sbx.kill();
    }
    assert.deepEqual(
      await readFile(join(await cgroupDir(sbx.id, 'cpu'), 'cgroup.procs')).catch(() => 'gone'),
      'gone',
      'its cgroup is removed with it',
    );
  }),
);

/**
 * A 256 MiB sandbox limited to 256M whose guest fills its RAM (tmpfs pages) until it dies.
 * Booted cold: a fork of the image's boot snapshot reads the guest's first pages from the
 * snapshot's page cache, not charged to its cgroup, and stays under the limit.
 */
async function fillToDeath(): Promise<Sandbox> {
  const hog = await create({ memoryMib: 256, limits: { memory: '256M' }, cold: true });
  await hog.commands
    .run(
      'mkdir -p /big && mount -t tmpfs -o size=250m tmpfs /big && dd if=/dev/zero of=/big/f bs=1M count=240',
      { timeoutMs: 60_000 },
    )
    .catch(() => undefined); // the sandbox dies under it
  await until(
    'the hog to die',
    async () => (await Sandbox.connect(hog.id, { url })).info.state === 'dead',
  );
  return hog;
}

test(
  'a memory hog dies at its host limit, reported as such; another sandbox runs on',
  logged(async () => {
    const other = await create({});
    let hog = await fillToDeath();
    let dead = (await Sandbox.connect(hog.id, { url })).info;
    // A 256 MiB guest touches ~250 MiB of its RAM at most, so the host limit is passed only
    // with QEMU's own memory on top; where that stayed small the guest's kernel ran out
    // first and panicked (QEMU "exited on its own": 1 of 5 runs here). One more try then.
    if (/exited on its own/.test(dead.reason ?? '')) {
      hog = await fillToDeath();
      dead = (await Sandbox.connect(hog.id, { url })).info;
    }
    try {
      assert.ok(other.info.limits?.memoryBytes, 'the defaults cap every sandbox');
      assert.match(dead.reason ?? '', /out of memory: .*memory limit of 256M/);
      const ps = await forkd(['ps', '--all'], { env: { ...home.env, FORKD_URL: url } });
      assert.match(ps.stdout.toString(), new RegExp(`${hog.id}\\s+dead \\(out of memory`));
      const r = await other.commands.run('echo alive');
      assert.equal(r.stdout, 'alive\n', 'another sandbox runs on');
      assert.deepEqual(
        await cgroupsLeft(home.paths.home).then((l) => l.some((d) => d.includes(hog.id))),
        false,
      );
    } finally {
      await Promise.allSettled([hog.kill(), other.kill()]);
    }
  }),
);

test(
  'branch children inherit limits, a fork overrides them, a pooled QEMU gets the fork’s',
  logged(async () => {
    const source = await create({ limits: { cpu: 0.5, pids: 100 } });
    try {
      const { snapshot, children } = await source.branch({ tag: 'lim', fork: 1 });
      const [child] = children?.sandboxes ?? [];
      assert.ok(child, 'the branch forked a child');
      assert.equal(child.info.limits?.cpu, 0.5);
      assert.equal(child.info.limits?.pids, 100);
      assert.equal(await quotaCores(child.id), 0.5);

      const snap = await Snapshot.get(snapshot.tag, { url });
      await snap.setPool(1);
      await until(
        'the pool to fill',
        async () => (await Snapshot.get(snapshot.tag, { url })).info.pool.ready === 1,
      );
      const { sandboxes } = await snap.fork({ n: 1, limits: { cpu: 0.25 } });
      const [pooled] = sandboxes;
      assert.ok(pooled);
      assert.equal(pooled.info.limits?.cpu, 0.25);
      assert.equal(pooled.info.limits?.pids, 100, 'what the fork does not name is inherited');
      assert.equal(await quotaCores(pooled.id), 0.25, 'the pooled QEMU took the fork’s quota');
      await snap.setPool(0);
      await Promise.all([child.kill(), pooled.kill()]);
    } finally {
      await source.kill();
    }
  }),
);

test(
  'after a daemon crash a live sandbox keeps its cgroup and a stray one is swept',
  logged(async () => {
    const sbx = await create({ limits: { cpu: 0.5 } });
    const parent = await homeCgroup(home.paths.home);
    assert.ok(parent);
    const stray = 'sbx-00000000dead';
    for (const dir of new Set(Object.values(parent.dirs()))) {
      await mkdir(join(dir, stray), { recursive: true });
    }
    process.kill(daemon?.pid as number, 'SIGKILL');
    await daemon?.exited;
    daemon = await startDaemon(home);
    url = daemon.url;
    const back = await Sandbox.connect(sbx.id, { url });
    assert.equal(back.info.state, 'running');
    assert.equal(await quotaCores(sbx.id), 0.5);
    const procs = await cgroupFile(sbx.id, 'cpu', 'cgroup.procs', 'cgroup.procs');
    assert.deepEqual(procs.split('\n').map(Number), [back.info.pid]);
    assert.equal((await parent.children()).includes(stray), false, 'the stray cgroup is gone');
    await back.kill();
  }),
);
