/**
 * Fork benchmark (issue: snapshots and fork-from-warm). Under the daemon's real services,
 * in-process, with real VMs:
 *  - cold boot + warm-up vs fork of the warm snapshot, request → first `exec` answered;
 *  - fan-out N = 1, 10, 50 (and 20): wall-clock until all answer, per child amortized,
 *    with and without the VMM pool;
 *  - host memory per idle child (PSS from smaps_rollup, summed over children / N) vs a
 *    cold-booted VM, at 256 MiB and 1 GiB of guest RAM.
 * Usage: node dist/bench/fork.js [--image busybox|py] [--quick]
 * It uses a temp FORKD_HOME linked to the set-up home's kernel and image (bench/home.ts).
 */
import { readFile } from 'node:fs/promises';
import { caller, startBenchServices, type BenchServices } from './services.js';
import { percentile, summary } from './stats.js';

const args = process.argv.slice(2);
const image = args.includes('--image') ? (args[args.indexOf('--image') + 1] as string) : 'busybox';
const quick = args.includes('--quick');
/** Guest RAM of the warm parent: 256 MiB for busybox, 512 MiB for Python + numpy. */
const WARM_MIB = image === 'py' ? 512 : 256;

/** A warm interpreter: numpy imported once, then it evaluates expressions sent on a FIFO. */
const PY_SERVER = `import numpy, os
for p in ('/tmp/q', '/tmp/a'):
    os.path.exists(p) or os.mkfifo(p)
open('/tmp/ready', 'w').write('1')
while True:
    with open('/tmp/q') as f: expr = f.read()
    with open('/tmp/a', 'w') as f: f.write(str(eval(expr)) + '\\n')
`;

/** What "warm" means per image, and the request whose answer the latency is measured to. */
const WORKLOAD: Record<
  string,
  { warm: string[]; start: string[]; waitFor?: string; cold: string[]; forked: string[] }
> = {
  busybox: {
    warm: ['echo warm > /tmp/w'],
    start: [],
    cold: ['sh', '-c', 'echo warm > /tmp/w; cat /tmp/w'],
    forked: ['cat', '/tmp/w'],
  },
  py: {
    warm: [`cat > /root/srv.py <<'PYEOF'\n${PY_SERVER}PYEOF`],
    start: ['python3 /root/srv.py'],
    waitFor: 'test -e /tmp/ready',
    cold: ['python3', '-c', 'import numpy; print(int(numpy.ones(3).sum()))'],
    forked: ['sh', '-c', 'echo "int(numpy.ones(3).sum())" > /tmp/q; cat /tmp/a'],
  },
};

async function pss(pid: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8');
  return Number(/^Pss:\s+(\d+)/m.exec(text)?.[1] ?? NaN) / 1024;
}

/** "No pool" means none: the default pre-warmed pool of created snapshots is off here. */
function setup() {
  return startBenchServices([image], { defaultPool: 0 });
}

type Env = BenchServices;

function snapshotRequest(tag: string, memoryMiB: number) {
  const w = WORKLOAD[image];
  if (!w) throw new Error(`no workload for image ${image}`);
  return { tag, image, memory_mib: memoryMiB, warm: w.warm, start: w.start, wait_for: w.waitFor };
}

/** Cold: boot from the image, warm up (py: import numpy), answer one exec. */
async function coldOnce(env: Env): Promise<number> {
  const t0 = performance.now();
  const sb = await env.sandboxes.create({ image, memory_mib: WARM_MIB }, caller);
  const cmd =
    image === 'py'
      ? ['python3', '-c', 'import numpy; print(int(numpy.ones(3).sum()))']
      : ['sh', '-c', 'echo warm > /tmp/w; cat /tmp/w'];
  await env.sandboxes.exec(sb.id, { argv: cmd });
  const ms = performance.now() - t0;
  await env.sandboxes.kill(sb.id);
  return ms;
}

/** Fork N children and wait until every one answered an exec. */
async function fanOut(
  env: Env,
  tag: string,
  n: number,
  argv: string[] = ['true'],
): Promise<{ ms: number; ids: string[] }> {
  const t0 = performance.now();
  const r = await env.snapshots.fork({ snapshot: tag, n }, caller);
  if (r.failed.length) throw new Error(`fork failed: ${JSON.stringify(r.failed[0])}`);
  await Promise.all(
    r.sandboxes.map(async (sb) => {
      const res = await env.sandboxes.exec(sb.id, { argv });
      if (res.exit_code !== 0) throw new Error(`${argv.join(' ')} failed in ${sb.id}`);
    }),
  );
  return { ms: performance.now() - t0, ids: r.sandboxes.map((s) => s.id) };
}

async function killAll(env: Env, ids: string[]) {
  await Promise.all(ids.map((id) => env.sandboxes.kill(id)));
}

/** Single forks from a pool of 4 (pre-warmed or not), the pool refilled between them. */
async function pooledForks(env: BenchServices, prewarm: boolean): Promise<number[]> {
  await env.snapshots.setPool('warm', 4, { prewarm });
  const out: number[] = [];
  for (let i = 0; i < (quick ? 5 : 15); i++) {
    await env.snapshots.pool.settled('warm');
    const { ms, ids } = await fanOut(env, 'warm', 1, WORKLOAD[image]?.forked);
    out.push(ms);
    await killAll(env, ids);
  }
  await env.snapshots.setPool('warm', 0);
  return out;
}

async function main() {
  const env = await setup();
  try {
    console.log(`fork benchmark — image ${image}, TCG, ${new Date().toISOString()}`);
    const t0 = performance.now();
    await env.snapshots.create(snapshotRequest('warm', WARM_MIB), caller);
    console.log(
      `snapshot create (boot + warm + capture + checksums): ${(performance.now() - t0).toFixed(0)} ms`,
    );

    const cold: number[] = [];
    for (let i = 0; i < (quick ? 2 : 5); i++) cold.push(await coldOnce(env));
    console.log(`cold boot + warm-up → exec answered: ${summary(cold)}`);

    const single: number[] = [];
    for (let i = 0; i < (quick ? 5 : 15); i++) {
      const { ms, ids } = await fanOut(env, 'warm', 1, WORKLOAD[image]?.forked);
      single.push(ms);
      await killAll(env, ids);
    }
    console.log(`fork (no pool) → exec answered: ${summary(single)}`);

    const pooled = await pooledForks(env, false);
    console.log(`fork (pool) → exec answered: ${summary(pooled)}`);
    const prewarmed = await pooledForks(env, true);
    console.log(`fork (pre-warmed pool) → exec answered: ${summary(prewarmed)}`);
    const ratio = (forks: number[]) => (percentile(cold, 50) / percentile(forks, 50)).toFixed(1);
    console.log(
      `ratio cold / fork (p50): no pool ${ratio(single)}×, pool ${ratio(pooled)}×, pre-warmed pool ${ratio(prewarmed)}×`,
    );

    for (const n of quick ? [1, 10] : [1, 10, 20, 50]) {
      for (const pool of ['no pool', 'pool', 'pre-warmed'] as const) {
        const size = pool === 'no pool' ? 0 : Math.min(n, 64);
        await env.snapshots.setPool('warm', size, { prewarm: pool === 'pre-warmed' });
        await env.snapshots.pool.settled('warm');
        const { ms, ids } = await fanOut(env, 'warm', n);
        const mem = await Promise.all(
          ids.map(async (id) => pss((await env.sandboxes.get(id)).pid as number)),
        );
        await new Promise((r) => setTimeout(r, 1000));
        const idle = await Promise.all(
          ids.map(async (id) => pss((await env.sandboxes.get(id)).pid as number)),
        );
        console.log(
          `fan-out N=${n} ${pool}: all answered in ${ms.toFixed(0)} ms, ${(ms / n).toFixed(1)} ms/child; PSS per idle child ${(idle.reduce((a, b) => a + b, 0) / n).toFixed(1)} MiB (just after answering ${(mem.reduce((a, b) => a + b, 0) / n).toFixed(1)})`,
        );
        await killAll(env, ids);
      }
    }
    await env.snapshots.setPool('warm', 0);

    for (const memoryMiB of [256, 1024]) {
      const tag = `m${memoryMiB}`;
      await env.snapshots.create(snapshotRequest(tag, memoryMiB), caller);
      const { ids } = await fanOut(env, tag, 10);
      await new Promise((r) => setTimeout(r, 2000));
      const per = await Promise.all(
        ids.map(async (id) => pss((await env.sandboxes.get(id)).pid as number)),
      );
      console.log(
        `idle child PSS, ${memoryMiB} MiB guest, 10 children: ${(per.reduce((a, b) => a + b, 0) / 10).toFixed(1)} MiB per child`,
      );
      await killAll(env, ids);
    }
    const sb = await env.sandboxes.create({ image, memory_mib: 256 }, caller);
    await new Promise((r) => setTimeout(r, 2000));
    console.log(
      `cold-booted VM PSS (256 MiB guest, idle): ${(await pss(sb.pid as number)).toFixed(1)} MiB`,
    );
    await env.sandboxes.kill(sb.id);
  } finally {
    await env.close();
  }
}

await main();
