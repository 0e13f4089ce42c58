/**
 * Noisy-neighbour benchmark for resource limits (docs/limits.md). A victim sandbox (default
 * limits) runs `exec true` N times (default 60) while idle, then while a noisy sandbox with
 * 2 vCPUs runs a CPU hog and a fork bomb in its guest: once with a 0.5-core quota and once
 * with a 2-core quota (this host's every core: no effective limit). It prints the victim's
 * p50/p90 each time, the ratio to idle, and how much CPU the noisy sandbox's cgroup used.
 * Usage: node dist/bench/limits.js [N]
 * It runs the services in-process on a temp FORKD_HOME linked to the set-up home's kernel
 * and busybox image.
 */
import { availableParallelism, loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { detectAccel } from '../src/drivers/qemu/accel.js';
import { caller, startBenchServices, type BenchServices } from './services.js';
import { percentile, summary } from './stats.js';

const N = Number(process.argv[2] ?? 60);
/** How long the load runs before the victim is timed (the fork bomb fills the guest). */
const SETTLE_MS = 4000;
/** A CPU hog and a fork bomb, detached from the exec so it returns at once. */
const LOAD =
  '(while :; do :; done) >/dev/null 2>&1 & (b() { b | b & }; b) >/dev/null 2>&1 & echo started';

async function execP50(s: BenchServices, id: string): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    await s.sandboxes.exec(id, { argv: ['true'] });
    times.push(performance.now() - t0);
  }
  return times;
}

/** CPU cores the noisy sandbox's cgroup used over `ms`, read from its usage. */
async function coresUsed(s: BenchServices, id: string, ms: number): Promise<number> {
  const a = (await s.sandboxes.get(id)).usage;
  const t0 = performance.now();
  await sleep(ms);
  const b = (await s.sandboxes.get(id)).usage;
  if (!a || !b) return NaN;
  return (b.cpu_seconds - a.cpu_seconds) / ((performance.now() - t0) / 1000);
}

async function underLoad(s: BenchServices, victim: string, cpu: number, idleP50: number) {
  const noisy = await s.sandboxes.create({ image: 'busybox', cpus: 2, limits: { cpu } }, caller);
  try {
    await s.sandboxes.exec(noisy.id, { argv: ['sh', '-c', LOAD], timeout_ms: 10_000 });
    await sleep(SETTLE_MS);
    const cores = await coresUsed(s, noisy.id, 2000);
    const times = await execP50(s, victim);
    const ratio = percentile(times, 50) / idleP50;
    console.log(
      `noisy neighbour with a ${cpu}-core quota (hog + fork bomb, 2 vCPUs): victim exec true ${summary(times)}; p50 ${ratio.toFixed(2)}× idle; the neighbour used ${cores.toFixed(2)} cores`,
    );
  } finally {
    await s.sandboxes.kill(noisy.id);
  }
}

async function main(): Promise<void> {
  const { accel } = await detectAccel();
  const cores = availableParallelism();
  // Other work on the host moves every number here: say how busy it was.
  const load = () =>
    loadavg()
      .map((l) => l.toFixed(1))
      .join(' ');
  console.log(`limits bench: ${N} execs per phase, accel ${accel}, ${cores} host cores`);
  console.log(`host load average at start: ${load()}`);
  const s = await startBenchServices(['busybox']);
  try {
    const victim = await s.sandboxes.create({ image: 'busybox' }, caller);
    console.log(`victim limits: ${JSON.stringify(victim.limits)}`);
    await execP50(s, victim.id); // warm-up: TCG translation, page cache
    const idle = await execP50(s, victim.id);
    const idleP50 = percentile(idle, 50);
    console.log(`idle: victim exec true ${summary(idle)}`);
    await underLoad(s, victim.id, 0.5, idleP50);
    await underLoad(s, victim.id, cores, idleP50);
    console.log(`host load average at end: ${load()}`);
  } finally {
    await s.close();
  }
}

await main();
