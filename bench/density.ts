/**
 * Density benchmark (issue 22, docs/idle.md "Leaner children"): under the daemon's real
 * services, in-process, busybox children forked from a warm snapshot:
 *  - PSS per idle child at N = 10 and 100 (smaps_rollup summed / N), per guest size, with
 *    ksmd's CPU and pages_sharing while they idle (when the run merges memory);
 *  - `exec true` p50 on one of them while N idle, and fork → first exec p50 (single forks
 *    as a user makes them, and a fan-out of --fanout children in one request; pool as the
 *    daemon sets it by default);
 *  - the climb: fork 10 more at a time, until `exec true` p50 on a running one passes
 *    100 ms, or --max sandboxes, or --minutes; `--park` pauses each batch first, and at the
 *    top wakes some of them: first `exec true` from paused and from hibernated at that scale.
 * Tuning comes from the environment as the daemon's flags would set it (FORKD_TCG_TB_MIB,
 * FORKD_MERGE_MEMORY). With merging, KSM is turned on at forkd's advised rate if it was off
 * and put back as it was at the end.
 * Usage: node dist/bench/density.js [--n 10,100] [--memory 256,1024] [--climb]
 *        [--park | --park-only] [--max 200] [--minutes 10] [--skip-pss] [--forks 15] [--fanout 20]
 *        [--ksm-wait 300] [--ksm-scans 3] [--breakdown] [--paused] [--python] [--settle 3]
 * `--check`: exit 1 when PSS per idle child at N = 10 grew more than 10 % over the figure
 * recorded in bench/results/density-baseline.json for the same settings (run it before a
 * release); `--record` writes the figures of this run there. `--inflate MIB`: every child
 * writes MIB MiB of fresh guest memory before PSS is read (a deliberately inflated child:
 * `--check --inflate 4` must exit 1, which shows the check catches a grown child).
 * `--python`: the children of a Python parent (forkd-test-python, a Python context with
 * numpy imported and a 1M-element array made: the warm parent of a code-interpreter agent)
 * instead of busybox ones.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { readKsm } from '../src/drivers/host/ksm.js';
import { vmTuning } from '../src/drivers/qemu/tuning.js';
import { caller, startBenchServices, type BenchServices } from './services.js';
import { percentile, summary } from './stats.js';

const args = process.argv.slice(2);
const opt = (name: string, dflt: string) =>
  args.includes(name) ? (args[args.indexOf(name) + 1] as string) : dflt;
const NS = opt('--n', '10,100').split(',').map(Number);
const MEMORIES = opt('--memory', '256').split(',').map(Number);
const MAX = Number(opt('--max', '200'));
const MINUTES = Number(opt('--minutes', '10'));
const FORKS = Number(opt('--forks', '15'));
const FANOUT = Number(opt('--fanout', '20'));
/** How long PSS waits for merging at most (100 children take minutes per full scan). */
const KSM_WAIT_S = Number(opt('--ksm-wait', '300'));
/**
 * Seconds the children idle before PSS is read (`--settle`): 3 by default, as the recorded
 * baseline was taken; 15 also covers what a child's kernel does ~5 s after a restore
 * (its periodic writeback and journal commit, when the fork dirtied its disk).
 */
const SETTLE_S = Number(opt('--settle', '3'));
/** Full KSM scans to wait for before PSS is read (see idlePss). */
const KSM_SCANS = Number(opt('--ksm-scans', '3'));
const STEP = 10;
/** Idle children are paused (the idle policy's first tier) instead of running. */
const PAUSED = args.includes('--paused');
/** MiB of guest memory each child writes before PSS is read (the check's self-test). */
const INFLATE_MIB = Number(opt('--inflate', '0'));
if (INFLATE_MIB && args.includes('--record')) {
  throw new Error('--record with --inflate: an inflated child is no baseline');
}

/** The warm parent the children are forked from. */
const PARENT = args.includes('--python')
  ? {
      image: 'forkd-test-python',
      contexts: ['python'],
      eval: ['import numpy as np', 'a = np.arange(1_000_000)'],
    }
  : { image: 'busybox', warm: ['echo warm > /tmp/w'] };

/**
 * Where one child's memory goes (`--breakdown`): its mappings by private memory (what no
 * other process shares), largest first, with PSS, and what KSM merged of it.
 */
async function breakdown(pid: number, top = 10): Promise<string> {
  const text = await readFile(`/proc/${pid}/smaps`, 'utf8').catch(() => '');
  const rows: { name: string; priv: number; pss: number; thp: number }[] = [];
  for (const block of text.split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    const head = block.split('\n')[0] ?? '';
    const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(block)?.[1] ?? 0);
    const [range, , , , , ...name] = head.split(/\s+/);
    const [a, b] = (range ?? '0-0').split('-').map((h) => parseInt(h, 16)) as [number, number];
    const label = name.join(' ') || `anon ${((b - a) / 1048576).toFixed(1)} MiB`;
    rows.push({
      name: label,
      priv: kb('Private_Clean') + kb('Private_Dirty'),
      pss: kb('Pss'),
      thp: kb('AnonHugePages'),
    });
  }
  const byName = new Map<string, { priv: number; pss: number; thp: number }>();
  for (const r of rows) {
    const e = byName.get(r.name) ?? { priv: 0, pss: 0, thp: 0 };
    byName.set(r.name, { priv: e.priv + r.priv, pss: e.pss + r.pss, thp: e.thp + r.thp });
  }
  const mib = (k: number) => (k / 1024).toFixed(1);
  const sorted = [...byName].sort((x, y) => y[1].priv - x[1].priv).slice(0, top);
  const ksm = await readFile(`/proc/${pid}/ksm_stat`, 'utf8').catch(() => '');
  const merged = Number(/ksm_merging_pages (\d+)/.exec(ksm)?.[1] ?? 0);
  const lines = sorted.map(
    ([n, v]) =>
      `    ${mib(v.priv).padStart(6)} private ${mib(v.pss).padStart(6)} PSS${v.thp ? ` (${mib(v.thp)} in huge pages)` : ''}  ${n}`,
  );
  return [
    `  one child (pid ${pid}), MiB, ${mib(merged * 4)} MiB of it merged by KSM:`,
    ...lines,
  ].join('\n');
}

const BASELINE = new URL('../../bench/results/density-baseline.json', import.meta.url);
/** How much PSS per child may grow over the recorded figure before --check fails. */
const GROWTH_ALLOWED = 0.1;

/** The settings a PSS figure holds for: the same key, the same child. */
function baselineKey(mib: number, n: number, paused: boolean): string {
  const t = vmTuning();
  const parent = args.includes('--python') ? 'python' : 'busybox';
  // Settings added after the first figures were recorded appear only when not the default.
  const capstone = t.disassembler ? ' capstone=on' : '';
  const settle = SETTLE_S === 3 ? '' : ` settle=${SETTLE_S}s`;
  return `${parent} ${mib}MiB n=${n} ${paused ? 'paused' : 'running'} tb=${t.tbMiB} merge=${t.merge} hugepages=${t.hugePages}${capstone}${settle}`;
}

/**
 * --record: keep this figure; --check: false (and a line saying why) when it grew more than
 * GROWTH_ALLOWED over the recorded one.
 */
async function againstBaseline(key: string, perChild: number): Promise<boolean> {
  const text = await readFile(BASELINE, 'utf8').catch(() => '{}');
  const recorded = JSON.parse(text) as Record<string, number>;
  if (args.includes('--record')) {
    recorded[key] = Number(perChild.toFixed(1));
    await writeFile(BASELINE, `${JSON.stringify(recorded, null, 2)}\n`);
    console.log(`  recorded as the baseline of "${key}"`);
  }
  const was = recorded[key];
  if (!args.includes('--check')) return true;
  if (was === undefined) {
    console.log(`  check: no baseline for "${key}" (run with --record)`);
    return false;
  }
  const ok = perChild <= was * (1 + GROWTH_ALLOWED);
  const growth = ((perChild / was - 1) * 100).toFixed(1);
  console.log(
    `  check: ${perChild.toFixed(1)} MiB vs ${was} recorded (${growth} %): ${ok ? 'ok' : 'REGRESSION'}`,
  );
  return ok;
}

async function pss(pid: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  return Number(/^Pss:\s+(\d+)/m.exec(text)?.[1] ?? NaN) / 1024;
}

/** CPU seconds of a process (utime + stime). */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** KSM's completed full scans of the mergeable memory (0 without KSM). */
async function fullScans(): Promise<number> {
  return Number(await readFile('/sys/kernel/mm/ksm/full_scans', 'utf8').catch(() => '0'));
}

/** ksmd's pid (a kernel thread: read only, to account its CPU). */
async function ksmdPid(): Promise<number | undefined> {
  for (const d of await readdir('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const comm = await readFile(`/proc/${d}/comm`, 'utf8').catch(() => '');
    if (comm.trim() === 'ksmd') return Number(d);
  }
  return undefined;
}

async function pids(env: BenchServices, ids: string[]): Promise<number[]> {
  return Promise.all(ids.map(async (id) => (await env.sandboxes.get(id)).pid as number));
}

/**
 * Fork n children, STEP at a time: 100 restores at once on 2 busy cores outlast the agent's
 * 30 s handshake. A failure kills the batch's healthy children before it is reported.
 */
async function fork(env: BenchServices, tag: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let done = 0; done < n; done += STEP) {
    const r = await env.snapshots.fork({ snapshot: tag, n: Math.min(STEP, n - done) }, caller);
    ids.push(...r.sandboxes.map((s) => s.id));
    if (r.failed.length) {
      await killAll(env, ids);
      throw new Error(`fork failed: ${JSON.stringify(r.failed[0])}`);
    }
  }
  return ids;
}

/**
 * N idle children; with --paused each batch of STEP is paused as soon as it answered (the
 * idle policy's first tier: its QEMU holds its memory but uses no CPU), so 100 of them fit
 * on 2 cores while the later batches fork.
 */
async function forkIdle(env: BenchServices, tag: string, n: number): Promise<string[]> {
  if (!PAUSED && !INFLATE_MIB) return fork(env, tag, n);
  const ids: string[] = [];
  try {
    for (let done = 0; done < n; done += STEP) {
      const batch = await fork(env, tag, Math.min(STEP, n - done));
      ids.push(...batch);
      if (INFLATE_MIB) await Promise.all(batch.map((id) => inflate(env, id)));
      if (PAUSED) await Promise.all(batch.map((id) => env.sandboxes.pause(id)));
    }
  } catch (e) {
    await killAll(env, ids);
    throw e;
  }
  return ids;
}

/** Make a child hold INFLATE_MIB MiB more: random bytes in its tmpfs (guest RAM it writes). */
async function inflate(env: BenchServices, id: string): Promise<void> {
  const cmd = `head -c ${INFLATE_MIB * 1048576} /dev/urandom > /dev/shm/inflate`;
  const r = await env.sandboxes.exec(id, { argv: ['sh', '-c', cmd] });
  if (r.exit_code !== 0) throw new Error(`inflating ${id} exited ${r.exit_code}`);
}

async function execTrue(env: BenchServices, id: string): Promise<number> {
  const t0 = performance.now();
  const r = await env.sandboxes.exec(id, { argv: ['true'] });
  if (r.exit_code !== 0) throw new Error(`true exited ${r.exit_code} in ${id}`);
  return performance.now() - t0;
}

async function execP50(env: BenchServices, id: string, n = 15): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(await execTrue(env, id));
  return out;
}

async function killAll(env: BenchServices, ids: string[]) {
  for (let i = 0; i < ids.length; i += 20) {
    await Promise.all(ids.slice(i, i + 20).map((id) => env.sandboxes.kill(id).catch(() => 0)));
  }
}

/**
 * Let N children idle; with merging, until KSM made two full scans (≤ --ksm-wait s). Returns
 * PSS per child and, with merging, ksmd's share of a core over that time.
 */
async function idlePss(ids: number[]): Promise<{ text: string; perChild: number }> {
  const merging = vmTuning().merge !== 'off';
  const ksmd = merging ? await ksmdPid() : undefined;
  const cpu0 = ksmd ? await cpuSeconds(ksmd) : 0;
  const t0 = performance.now();
  await sleep(SETTLE_S * 1000);
  // KSM merges a page on its second full scan after the page appeared, and a pause between
  // two scan passes looks like a plateau of pages_sharing: wait for --ksm-scans full scans.
  const scans0 = await fullScans();
  while (
    merging &&
    (await fullScans()) < scans0 + KSM_SCANS &&
    performance.now() - t0 < KSM_WAIT_S * 1000
  ) {
    await sleep(3000);
  }
  const secs = (performance.now() - t0) / 1000;
  const per = (await Promise.all(ids.map(pss))).reduce((a, b) => a + b, 0) / ids.length;
  let extra = '';
  if (ksmd) {
    const share = (((await cpuSeconds(ksmd)) - cpu0) * 100) / secs;
    const k = await readKsm();
    extra = `; ksmd ${share.toFixed(1)} % of a core over ${secs.toFixed(0)} s (${(await fullScans()) - scans0} full scans), pages_sharing ${k?.pagesSharing}`;
    const cpu1 = await cpuSeconds(ksmd);
    await sleep(10_000);
    extra += `, then steady ${(((await cpuSeconds(ksmd)) - cpu1) * 10).toFixed(1)} % of a core`;
  }
  if (args.includes('--breakdown')) extra += `\n${await breakdown(ids[0] as number)}`;
  return { text: `${per.toFixed(1)} MiB per child${extra}`, perChild: per };
}

/** Single forks as a user makes them: fork, first exec answered, kill. */
async function forkToExec(env: BenchServices, tag: string, n = 15): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    await sleep(1000); // a user's pace: the pool refills between forks
    const t0 = performance.now();
    const [id] = await fork(env, tag, 1);
    await execTrue(env, id as string);
    out.push(performance.now() - t0);
    await env.sandboxes.kill(id as string);
  }
  return out;
}

/**
 * Fan-out as a user makes it: one fork request for n children, then `exec true` in each at
 * once; per child, the time from the request to its exec answered, and the wall clock / n.
 */
async function fanOut(env: BenchServices, tag: string, n: number): Promise<string> {
  const t0 = performance.now();
  const r = await env.snapshots.fork({ snapshot: tag, n }, caller);
  const ids = r.sandboxes.map((s) => s.id);
  try {
    if (r.failed.length) throw new Error(`fork failed: ${JSON.stringify(r.failed[0])}`);
    const each = await Promise.all(
      ids.map(async (id) => {
        await execTrue(env, id);
        return performance.now() - t0;
      }),
    );
    const wall = Math.max(...each);
    return `${summary(each)}; all ${n} answered in ${wall.toFixed(0)} ms, ${(wall / n).toFixed(1)} ms per child`;
  } finally {
    await killAll(env, ids);
  }
}

/** What the host has left: memory available, load average, this process's open fds. */
async function hostLeft(): Promise<string> {
  const meminfo = await readFile('/proc/meminfo', 'utf8');
  const avail = Number(/^MemAvailable:\s+(\d+)/m.exec(meminfo)?.[1] ?? NaN) / 1024 / 1024;
  const load = (await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ');
  const fds = (await readdir('/proc/self/fd')).length;
  return `host: ${avail.toFixed(1)} GiB available, load ${load}, ${fds} fds open here`;
}

/**
 * At the top of a parked climb: the first `exec true` of parked sandboxes, each woken once
 * from paused (`cont` + clock push + the exec), then from hibernated (restore + the exec).
 */
async function wakeAtScale(env: BenchServices, parked: string[], n = 10): Promise<void> {
  const pick = parked.slice(-n);
  const fromPaused: number[] = [];
  for (const id of pick) fromPaused.push(await execTrue(env, id));
  console.log(`  first exec true from paused, ${parked.length} parked: ${summary(fromPaused)}`);
  const hib = pick.slice(0, Math.ceil(n / 2));
  for (const id of hib) await env.sandboxes.pause(id, { tier: 'hibernated' });
  const fromHibernated: number[] = [];
  for (const id of hib) fromHibernated.push(await execTrue(env, id));
  console.log(`  first exec true from hibernated: ${summary(fromHibernated)}`);
}

/** Fork STEP at a time (paused when parking) until exec p50 on a running one passes 100 ms. */
async function climb(env: BenchServices, tag: string, park: boolean): Promise<void> {
  const deadline = Date.now() + MINUTES * 60_000;
  const [probe] = await fork(env, tag, 1);
  const ids: string[] = [probe as string];
  let stop = `--max ${MAX} reached`;
  try {
    while (ids.length < MAX) {
      if (Date.now() >= deadline) {
        stop = `--minutes ${MINUTES} passed`;
        break;
      }
      const batch = await fork(env, tag, STEP).catch((e: unknown) => {
        stop = `a fork failed: ${e instanceof Error ? e.message : String(e)}`;
        return undefined;
      });
      if (!batch) break;
      ids.push(...batch);
      if (park) await Promise.all(batch.map((id) => env.sandboxes.pause(id)));
      await sleep(2000);
      const p50 = percentile(await execP50(env, probe as string, 10), 50);
      const mem = (await Promise.all((await pids(env, ids)).map(pss))).reduce((a, b) => a + b, 0);
      console.log(
        `  ${ids.length} sandboxes${park ? ` (${ids.length - 1} paused)` : ''}: exec true p50 ${p50.toFixed(1)} ms, PSS total ${(mem / 1024).toFixed(2)} GiB`,
      );
      if (p50 > 100) {
        stop = 'exec true p50 passed 100 ms';
        break;
      }
    }
    console.log(`  stopped at ${ids.length}: ${stop}; ${await hostLeft()}`);
    if (park) await wakeAtScale(env, ids.slice(1));
  } finally {
    await killAll(env, ids);
  }
}

async function main() {
  const ksmBefore = await readKsm();
  const env = await startBenchServices([PARENT.image]);
  // A run stopped from outside (timeout, Ctrl-C) still ends every VM it started.
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => void env.close().finally(() => process.exit(130)));
  }
  try {
    const t = vmTuning();
    console.log(
      `density benchmark — ${PARENT.image}, TCG, tb-size ${t.tbMiB ?? 'QEMU default'} MiB, merge ${t.merge}, pool by default: see fork → exec, ${new Date().toISOString()}`,
    );
    for (const mib of MEMORIES) {
      const tag = `d${mib}`;
      await env.snapshots.create({ tag, memory_mib: mib, ...PARENT }, caller);
      if (args.includes('--skip-pss')) continue;
      for (const n of NS) {
        const ids = await forkIdle(env, tag, n);
        try {
          const what = `idle children, ${PAUSED ? 'paused' : 'running'}${INFLATE_MIB ? `, each inflated by ${INFLATE_MIB} MiB` : ''}`;
          const { text, perChild } = await idlePss(await pids(env, ids));
          console.log(`${mib} MiB guest, N=${n} ${what}: ${text}`);
          if (n === 10 && !(await againstBaseline(baselineKey(mib, n, PAUSED), perChild))) {
            process.exitCode = 1;
          }
          console.log(
            `  exec true on one of them: ${summary(await execP50(env, ids[0] as string))}`,
          );
        } finally {
          await killAll(env, ids);
        }
      }
    }
    const tag = `d${MEMORIES[0]}`;
    if (FORKS > 0) {
      console.log(
        `fork → first exec answered (single forks, 1/s): ${summary(await forkToExec(env, tag, FORKS))}`,
      );
    }
    if (FANOUT > 0) {
      await sleep(2000); // the default pool refills after the single forks
      console.log(
        `fork → first exec, fan-out of ${FANOUT} in one request (from the request): ${await fanOut(env, tag, FANOUT)}`,
      );
    }
    if (args.includes('--climb')) {
      console.log(`climb (step ${STEP}, max ${MAX}, ${MINUTES} min)`);
      if (!args.includes('--park-only')) {
        console.log('climb, running:');
        await climb(env, tag, false);
      }
      if (args.includes('--park') || args.includes('--park-only')) {
        console.log('climb, parked (all paused but the probe):');
        await climb(env, tag, true);
      }
    }
  } finally {
    await env.close();
    if (ksmBefore && !ksmBefore.running && (await readKsm())?.running) {
      await writeFile('/sys/kernel/mm/ksm/pages_to_scan', String(ksmBefore.pagesToScan));
      await writeFile('/sys/kernel/mm/ksm/sleep_millisecs', String(ksmBefore.sleepMs));
      await writeFile('/sys/kernel/mm/ksm/run', '0');
    }
  }
}

await main();
