/**
 * Branch storage benchmark (issue 11, "branch storage in proportion to change"): a sandbox
 * that writes ~10 MiB of fresh memory between 10 successive branches. Prints the disk the
 * 10 branches take (sum of their files' allocated bytes) against the issue's target
 * (≤ 2 × what was written + one full memory image: the first branch's memory file), and
 * fork latency (request → exec answered) of the 10th branch against the 1st.
 * Usage: node dist/bench/branch-storage.js [BRANCHES=10] [MIB_PER_STEP=10]
 */
import { caller, startBenchServices, type BenchServices } from './services.js';
import { summary } from './stats.js';

const BRANCHES = Number(process.argv[2] ?? 10);
const STEP_MIB = Number(process.argv[3] ?? 10);
const MiB = 1048576;

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

/** Bytes a snapshot's memory file and whole snapshot take on disk. */
async function stored(env: BenchServices, tag: string): Promise<{ memory: number; all: number }> {
  const info = await env.snapshots.get(tag);
  const memory = info.files.find((f) => f.name === 'memory')?.allocated ?? 0;
  return { memory, all: info.physical_bytes };
}

async function main(): Promise<void> {
  const env = await startBenchServices(['busybox']);
  try {
    console.log(
      `branch storage — busybox, TCG, ${BRANCHES} branches, ${STEP_MIB} MiB written between each, ${new Date().toISOString()}`,
    );
    const sb = await env.sandboxes.create({ image: 'busybox', memory_mib: 256 }, caller);
    const tags: string[] = [];
    let total = 0;
    for (let i = 0; i < BRANCHES; i++) {
      await sh(
        env,
        sb.id,
        `dd if=/dev/urandom of=/dev/shm/step${i} bs=1M count=${STEP_MIB} 2>/dev/null`,
      );
      const tag = `step${i}`;
      await env.branch.branch(sb.id, { tag }, caller);
      const s = await stored(env, tag);
      total += s.all;
      tags.push(tag);
      console.log(
        `  ${tag}: ${(s.all / MiB).toFixed(1)} MiB on disk (memory ${(s.memory / MiB).toFixed(1)} MiB)`,
      );
    }
    await env.sandboxes.kill(sb.id);
    const written = BRANCHES * STEP_MIB * MiB;
    const target = 2 * written + (await stored(env, tags[0] as string)).memory;
    console.log(
      `total disk for ${BRANCHES} branches: ${(total / MiB).toFixed(1)} MiB; target ≤ ${(target / MiB).toFixed(1)} MiB (2 × ${(written / MiB).toFixed(0)} MiB written + one full memory image): ${total <= target ? 'MET' : 'NOT MET'}`,
    );
    const first = await forkLatency(env, tags[0] as string);
    const last = await forkLatency(env, tags.at(-1) as string);
    console.log(`fork → exec answered, branch 1: ${summary(first)}`);
    console.log(`fork → exec answered, branch ${BRANCHES}: ${summary(last)}`);
    await env.snapshots.remove(tags[0] as string, { cascade: true });
  } finally {
    await env.close();
  }
}

await main();
