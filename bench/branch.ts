/**
 * Branch benchmark (issue: branch, chains, lineage). With real VMs under the daemon's
 * services, in-process:
 *  - source pause (stop → cont) p50/p90 over N branches, 256 MiB and 1 GiB guests, idle
 *    and with a guest process rewriting 64 MiB as fast as it can; total branch time;
 *  - fork latency (request → exec answered) from chains of depth 0, 1, 3 and compacted.
 * Usage: node dist/bench/branch.js [N=10]
 */
import { caller, startBenchServices, type BenchServices } from './services.js';
import { summary } from './stats.js';

const N = Number(process.argv[2] ?? 10);
const WRITER =
  'dd if=/dev/urandom of=/dev/shm/src bs=1M count=64 2>/dev/null; while true; do cp /dev/shm/src /dev/shm/dst; done';

async function sh(env: BenchServices, id: string, script: string): Promise<void> {
  const r = await env.sandboxes.exec(id, { argv: ['sh', '-c', script] });
  if (r.exit_code !== 0) throw new Error(`${script}: exit ${r.exit_code}`);
}

async function pauses(env: BenchServices, memoryMiB: number, writing: boolean): Promise<void> {
  const sb = await env.sandboxes.create({ image: 'busybox', memory_mib: memoryMiB }, caller);
  if (writing) {
    await sh(env, sb.id, `(${WRITER}) </dev/null >/dev/null 2>&1 &`);
    await new Promise((r) => setTimeout(r, 3000)); // let it write its 64 MiB at least once
  }
  const pause: number[] = [];
  const total: number[] = [];
  const mib: number[] = [];
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    const res = await env.snapshots.branch(
      sb.id,
      { tag: `p${memoryMiB}-${writing ? 'w' : 'i'}-${i}` },
      caller,
    );
    total.push(performance.now() - t0);
    pause.push(res.pause_ms);
    mib.push(res.captured_bytes / 1048576);
  }
  const label = `${memoryMiB} MiB guest, ${writing ? 'writing 64 MiB' : 'idle'}`;
  console.log(`pause, ${label}: ${summary(pause)}`);
  console.log(
    `  total branch (capture + checksums): ${summary(total)}; captured ${summary(mib, 'MiB')}`,
  );
  await env.sandboxes.kill(sb.id);
  for (let i = N - 1; i >= 0; i--) {
    await env.snapshots.remove(`p${memoryMiB}-${writing ? 'w' : 'i'}-${i}`, {});
  }
}

async function forkLatency(env: BenchServices, tag: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < 8; i++) {
    const t0 = performance.now();
    const r = await env.snapshots.fork({ snapshot: tag, n: 1 }, caller);
    const id = r.sandboxes[0]?.id as string;
    await env.sandboxes.exec(id, { argv: ['true'] });
    out.push(performance.now() - t0);
    await env.sandboxes.kill(id);
  }
  return out;
}

async function chains(env: BenchServices): Promise<void> {
  const sb = await env.sandboxes.create({ image: 'busybox' }, caller);
  for (let d = 0; d <= 3; d++) {
    await sh(env, sb.id, `echo ${d} > /root/depth`);
    await env.snapshots.branch(sb.id, { tag: `depth${d}` }, caller);
  }
  await env.sandboxes.kill(sb.id);
  await env.snapshots.compact('depth3', 'depth3-flat', caller);
  for (const tag of ['depth0', 'depth1', 'depth3', 'depth3-flat']) {
    const info = await env.snapshots.get(tag);
    console.log(
      `fork → exec answered from ${tag} (chain depth ${info.depth}): ${summary(await forkLatency(env, tag))}`,
    );
  }
}

async function main(): Promise<void> {
  const env = await startBenchServices(['busybox']);
  try {
    console.log(`branch benchmark — busybox, TCG, N=${N}, ${new Date().toISOString()}`);
    for (const memoryMiB of [256, 1024]) {
      for (const writing of [false, true]) await pauses(env, memoryMiB, writing);
    }
    await chains(env);
  } finally {
    await env.close();
  }
}

await main();
