/**
 * What confining QEMU costs (docs/security.md): fork → exec answered (no pool) and the
 * pause of a branch, with confinement off, on (seccomp with spawn allowed, own uid: live
 * branches) and on with spawn denied (a `--branch-mode copy` daemon: copy branches).
 * Usage: node dist/bench/confine.js [forks] [branches]
 * In-process services on a temp FORKD_HOME linked to the set-up home's kernel and busybox.
 */
import { loadavg } from 'node:os';
import type { BranchModeT } from '../src/contract/schemas.js';
import { caller, startBenchServices } from './services.js';
import { percentile, summary } from './stats.js';

const FORKS = Number(process.argv[2] ?? 8);
const BRANCHES = Number(process.argv[3] ?? 5);

interface Variant {
  name: string;
  confine: boolean;
  branchMode: BranchModeT | 'auto';
}

const VARIANTS: Variant[] = [
  { name: 'unconfined', confine: false, branchMode: 'auto' },
  { name: 'confined (spawn allowed)', confine: true, branchMode: 'auto' },
  { name: 'confined (spawn denied, copy branches)', confine: true, branchMode: 'copy' },
];

async function measure(v: Variant): Promise<{ fork: number; pause: number }> {
  const s = await startBenchServices(['busybox'], { confine: v.confine, branchMode: v.branchMode });
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
