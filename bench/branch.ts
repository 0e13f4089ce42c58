/**
 * Branch benchmark (issues: branch, chains, lineage; live branch). With real VMs under the
 * daemon's services, in-process:
 *  - source pause (stop → cont) p50/p90, mode copy vs live on the same source and writer
 *    in one run (the modes alternate branch by branch): 256 MiB and 1 GiB guests, each a
 *    fork of a fresh snapshot, with 0, 64 and 512 MiB rewritten by a guest process as fast
 *    as it can; for live also the fork injection and the copy made after resume;
 *  - fork latency (request → exec answered) from chains of depth 0, 1, 3 and compacted.
 * Usage: node dist/bench/branch.js [N=10]
 */
import type { BranchRequestT } from '../src/contract/schemas.js';
import { caller, startBenchServices, type BenchServices } from './services.js';
import { summary } from './stats.js';

const N = Number(process.argv[2] ?? 10);
const MODES = ['copy', 'live'] as const;

/** Rewrites the same `mib` MiB of guest memory (a tmpfs file) in place, endlessly. */
function writer(mib: number): string {
  const dd = `dd if=/dev/zero of=/mnt/w/f bs=1M count=${mib} conv=notrunc 2>/dev/null`;
  return `mkdir -p /mnt/w && mount -t tmpfs -o size=${mib + 8}m tmpfs /mnt/w && ${dd} && touch /tmp/written && while true; do ${dd}; done`;
}

async function sh(env: BenchServices, id: string, script: string): Promise<void> {
  const r = await env.sandboxes.exec(id, { argv: ['sh', '-c', script] });
  if (r.exit_code !== 0) throw new Error(`${script}: exit ${r.exit_code}`);
}

type Samples = Record<string, number[]>;

function push(s: Samples, key: string, v: number | undefined): void {
  if (v !== undefined) (s[key] ??= []).push(v);
}

/** N branches per mode of one source; returns the samples by mode and measure. */
async function branchBoth(env: BenchServices, id: string, label: string): Promise<Samples> {
  const s: Samples = {};
  for (let i = 0; i < N; i++) {
    for (const mode of MODES) {
      const req: BranchRequestT = { tag: `${label}-${mode}-${i}`, mode };
      const t0 = performance.now();
      const res = await env.branch.branch(id, req, caller);
      push(s, `${mode} pause`, res.pause_ms);
      push(s, `${mode} total`, performance.now() - t0);
      push(s, `${mode} MiB`, res.captured_bytes / 1048576);
      push(s, `${mode} fork`, res.timings.fork_ms);
      push(s, `${mode} copy`, res.timings.copy_ms);
    }
  }
  return s;
}

async function pauses(env: BenchServices, memoryMiB: number): Promise<void> {
  const base = `base-${memoryMiB}`;
  await env.snapshots.create({ tag: base, image: 'busybox', memory_mib: memoryMiB }, caller);
  for (const written of [0, 64, 512]) {
    const label = `${memoryMiB} MiB guest, ${written} MiB written`;
    if (written >= memoryMiB) {
      console.log(`${label}: n/a (more than the guest has)`);
      continue;
    }
    const [sb] = (await env.snapshots.fork({ snapshot: base, n: 1 }, caller)).sandboxes;
    const id = sb?.id as string;
    if (written) {
      await sh(env, id, `(${writer(written)}) </dev/null >/dev/null 2>&1 &`);
      await sh(env, id, 'while [ ! -e /tmp/written ]; do sleep 0.2; done; sleep 1');
    }
    const s = await branchBoth(env, id, `p${memoryMiB}-${written}`);
    for (const mode of MODES) {
      console.log(`${label}, ${mode}: pause ${summary(s[`${mode} pause`] ?? [])}`);
      const parts = [`captured ${summary(s[`${mode} MiB`] ?? [], 'MiB')}`];
      if (mode === 'live') parts.push(`fork injection ${summary(s['live fork'] ?? [])}`);
      parts.push(
        `page copy ${summary(s[`${mode} copy`] ?? [])}${mode === 'live' ? ' (after resume)' : ''}`,
      );
      parts.push(`total branch ${summary(s[`${mode} total`] ?? [])}`);
      console.log(`  ${parts.join('; ')}`);
    }
    await env.sandboxes.kill(id);
    await env.snapshots.remove(`p${memoryMiB}-${written}-copy-0`, { cascade: true });
  }
  await env.snapshots.remove(base, { cascade: true });
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
    await env.branch.branch(sb.id, { tag: `depth${d}` }, caller);
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
    for (const memoryMiB of [256, 1024]) await pauses(env, memoryMiB);
    await chains(env);
  } finally {
    await env.close();
  }
}

await main();
