/**
 * What confining QEMU costs (docs/security.md): QEMU start (spawn → monitor answering,
 * with and without the launcher's jail), fork → exec answered (no pool) and the pause of a
 * branch, with confinement off, on without the jail, on (seccomp with spawn allowed, own
 * uid, jailed: live branches) and on with spawn denied (a `--branch-mode copy` daemon).
 * Usage: node dist/bench/confine.js [forks] [branches] [starts]
 * In-process services on a temp FORKD_HOME linked to the set-up home's kernel and busybox.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BranchModeT } from '../src/contract/schemas.js';
import { QmpClient } from '../src/drivers/qemu/qmp.js';
import { QEMU_EXEC_BINARY } from '../src/drivers/qemu/tuning.js';
import { QEMU_BINARY } from '../src/drivers/qemu/vm.js';
import { caller, startBenchServices } from './services.js';
import { percentile, summary, timeSequential } from './stats.js';

const FORKS = Number(process.argv[2] ?? 8);
const BRANCHES = Number(process.argv[3] ?? 5);
const STARTS = Number(process.argv[4] ?? 20);

interface Variant {
  name: string;
  confine: boolean;
  jail?: boolean;
  branchMode: BranchModeT | 'auto';
}

const VARIANTS: Variant[] = [
  { name: 'unconfined', confine: false, branchMode: 'auto' },
  { name: 'confined, not jailed (spawn allowed)', confine: true, jail: false, branchMode: 'auto' },
  { name: 'confined, jailed (spawn allowed)', confine: true, branchMode: 'auto' },
  { name: 'confined, jailed (spawn denied, copy branches)', confine: true, branchMode: 'copy' },
];

/** One QEMU (stopped, no disk) through the launcher, timed until its monitor answers. */
async function startOnce(dir: string, jail: boolean): Promise<void> {
  const sock = join(dir, 'qmp.sock');
  const qemu = [QEMU_BINARY, '-M', 'microvm', '-nodefaults', '-display', 'none', '-S'];
  const args = ['--no-thp', ...(jail ? ['--jail', '--rw', dir] : []), '--', ...qemu];
  const child = spawn(QEMU_EXEC_BINARY, [...args, '-qmp', `unix:${sock},server=on,wait=off`], {
    stdio: 'ignore',
  });
  const gone = new Promise((r) => child.once('exit', r));
  try {
    (await QmpClient.connect(sock)).close();
  } finally {
    child.kill('SIGKILL');
    await gone;
    await rm(sock, { force: true });
  }
}

async function measureStart(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-confine-bench-'));
  try {
    for (const jail of [false, true, false, true]) {
      const t = await timeSequential(STARTS, () => startOnce(dir, jail));
      console.log(`QEMU start, ${jail ? 'jailed' : 'not jailed'}: ${summary(t)}`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function measure(v: Variant): Promise<{ fork: number; pause: number }> {
  const s = await startBenchServices(['busybox'], {
    confine: v.confine,
    branchMode: v.branchMode,
    jail: v.jail ?? true, // set by each variant: the setting outlives the services
    network: false, // what is measured needs none; other daemons on the host share its addresses
  });
  try {
    const src = await s.sandboxes.create({ image: 'busybox' }, caller);
    await s.sandboxes.exec(src.id, {
      argv: ['sh', '-c', 'dd if=/dev/urandom of=/dev/shm/w bs=1M count=16 2>/dev/null'],
    });
    const pauses: number[] = [];
    let mode = '';
    for (let i = 0; i < BRANCHES; i++) {
      const r = await s.branch.branch(src.id, { tag: `b${i}` }, caller);
      pauses.push(r.pause_ms);
      mode = r.mode;
    }
    const forks: number[] = [];
    for (let i = 0; i < FORKS; i++) {
      const t0 = performance.now();
      const r = await s.snapshots.fork({ snapshot: 'b0', n: 1 }, caller);
      const kid = r.sandboxes[0];
      if (!kid) throw new Error(`fork failed: ${JSON.stringify(r.failed[0])}`);
      await s.sandboxes.exec(kid.id, { argv: ['true'] });
      forks.push(performance.now() - t0);
      await s.sandboxes.kill(kid.id);
    }
    const { confinement } = await s.sandboxes.get(src.id);
    console.log(`${v.name}: QEMU ${JSON.stringify(confinement ?? 'unconfined')}`);
    console.log(`  fork → exec answered (no pool): ${summary(forks)}`);
    console.log(`  branch pause (${mode}, 16 MiB written before): ${summary(pauses)}`);
    return { fork: percentile(forks, 50), pause: percentile(pauses, 50) };
  } finally {
    await s.close();
  }
}

async function main(): Promise<void> {
  const load = () =>
    loadavg()
      .map((l) => l.toFixed(1))
      .join(' ');
  console.log(`confinement bench: ${FORKS} forks, ${BRANCHES} branches per variant, TCG`);
  console.log(`host load average at start: ${load()}`);
  await measureStart();
  const base = await measure(VARIANTS[0] as Variant);
  for (const v of VARIANTS.slice(1)) {
    const r = await measure(v);
    console.log(
      `  vs unconfined: fork p50 ${(r.fork - base.fork).toFixed(1)} ms, pause p50 ${(r.pause - base.pause).toFixed(1)} ms`,
    );
  }
  console.log(`host load average at end: ${load()}`);
}

await main();
