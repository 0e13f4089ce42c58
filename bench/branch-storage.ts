/**
 * Branch storage benchmark (issue 11, "branch storage in proportion to change"): a sandbox
 * that writes ~10 MiB of fresh memory between 10 successive branches, in each branch mode.
 * Prints, per branch, the disk it takes (its files' allocated bytes), how its memory is
 * stored (full, or a diff over its parent: stored bytes) and the branch's pause; then the
 * total against the issue's target (≤ 2 × what was written + one full memory image: the
 * first branch's memory, full as the source was booted from an image); then, for the 1st
 * and the last branch, the first fork's materialization (time, bytes) and fork latency
 * (request → exec answered) once materialized.
 * Usage: node dist/bench/branch-storage.js [BRANCHES=10] [MIB_PER_STEP=10] [MODES=copy,live]
 */
import { readManifest } from '../src/services/snapshots/files.js';
import { materialize } from '../src/services/snapshots/memory.js';
import { caller, startBenchServices, type BenchServices } from './services.js';
import { percentile, summary } from './stats.js';

const BRANCHES = Number(process.argv[2] ?? 10);
const STEP_MIB = Number(process.argv[3] ?? 10);
const MODES = (process.argv[4] ?? 'copy,live').split(',') as ('copy' | 'live')[];
const MiB = 1048576;
const mib = (n: number) => `${(n / MiB).toFixed(1)} MiB`;

async function sh(env: BenchServices, id: string, script: string): Promise<void> {
  const r = await env.sandboxes.exec(id, { argv: ['sh', '-c', script] });
  if (r.exit_code !== 0) throw new Error(`${script}: exit ${r.exit_code}`);
}

async function forkLatency(env: BenchServices, tag: string, n = 5): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const id = (await env.snapshots.fork({ snapshot: tag, n: 1 }, caller)).sandboxes[0]?.id;
    await env.sandboxes.exec(id as string, { argv: ['true'] });
    out.push(performance.now() - t0);
    await env.sandboxes.kill(id as string);
  }
  return out;
}

/** Materialize a branch's memory as its first fork would, then time forks of it. */
async function forksOf(env: BenchServices, tag: string): Promise<number[]> {
  const m = await readManifest(env.p, tag);
  const built = await materialize(env.p, m);
  const { memory } = await env.snapshots.get(tag);
  console.log(
    `  ${tag}: memory ${memory?.kind}${memory?.parent ? ` over ${memory.parent}` : ''} (depth ${memory?.depth}); ` +
      `materialized in ${built.ms} ms${built.built ? '' : ' (full: nothing to build)'}, ${mib(memory?.materialized_bytes ?? 0)} cached`,
  );
  return forkLatency(env, tag);
}

async function run(env: BenchServices, mode: 'copy' | 'live'): Promise<void> {
  console.log(`mode ${mode}:`);
  const sb = await env.sandboxes.create({ image: 'busybox', memory_mib: 256 }, caller);
  const tags: string[] = [];
  const pauses: number[] = [];
  let total = 0;
  for (let i = 0; i < BRANCHES; i++) {
    await sh(
      env,
      sb.id,
      `dd if=/dev/urandom of=/dev/shm/step${i} bs=1M count=${STEP_MIB} 2>/dev/null`,
    );
    const tag = `${mode}-step${i}`;
    const res = await env.branch.branch(sb.id, { tag, mode }, caller);
    pauses.push(res.pause_ms);
    const info = await env.snapshots.get(tag);
    total += info.physical_bytes;
    tags.push(tag);
    const m = info.memory;
    console.log(
      `  ${tag}: ${mib(info.physical_bytes)} on disk; memory ${m?.kind}${m?.parent ? ` over ${m.parent}` : ''}, ` +
        `${mib(m?.stored_bytes ?? 0)} stored of ${mib(m?.logical_bytes ?? 0)}; pause ${res.pause_ms.toFixed(1)} ms`,
    );
  }
  await env.sandboxes.kill(sb.id);
  const written = BRANCHES * STEP_MIB * MiB;
  const full = (await env.snapshots.get(tags[0] as string)).memory?.stored_bytes ?? 0;
  const target = 2 * written + full;
  console.log(
    `  total disk for ${BRANCHES} branches: ${mib(total)}; target ≤ ${mib(target)} (2 × ${mib(written)} written + one full memory image of ${mib(full)}): ${total <= target ? 'MET' : 'NOT MET'}`,
  );
  console.log(`  branch pause (${mode}): ${summary(pauses)}`);
  const first = await forksOf(env, tags[0] as string);
  const last = await forksOf(env, tags.at(-1) as string);
  console.log(`  fork → exec answered, branch 1: ${summary(first)}`);
  console.log(`  fork → exec answered, branch ${BRANCHES}: ${summary(last)}`);
  const ratio = percentile(last, 50) / percentile(first, 50);
  console.log(
    `  fork p50 of branch ${BRANCHES} / branch 1: ${ratio.toFixed(2)} (target within 20 %: ${Math.abs(ratio - 1) <= 0.2 ? 'MET' : 'NOT MET'})`,
  );
  await env.snapshots.remove(tags[0] as string, { cascade: true });
}

async function main(): Promise<void> {
  const env = await startBenchServices(['busybox']);
  try {
    console.log(
      `branch storage — busybox, TCG, ${BRANCHES} branches, ${STEP_MIB} MiB written between each, ${new Date().toISOString()}`,
    );
    for (const mode of MODES) await run(env, mode);
  } finally {
    await env.close();
  }
}

await main();
