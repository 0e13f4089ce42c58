/**
 * Where the time of `forkd run -- echo hi` goes (issue 33), phase by phase, without a daemon
 * and through one. Each run is a real CLI process with `FORKD_PHASES` set: the CLI and the
 * daemon append their marks (src/util/phases.ts) to one file, and this bench adds the spawn
 * and the exit it saw, so a run is one timeline across both processes. Printed: per step
 * (the mark reached, timed from the mark before it), the p50 over the runs and how many
 * runs passed it, in the order of a typical run; the end-to-end p50; and `node -e 0`
 * timed in the same loop (the floor any Node CLI pays at this load).
 * Through the daemon each run waits first until the boot snapshot's pool holds a
 * pre-warmed VM again (as a user who runs one command now and then finds it).
 * Usage: node dist/bench/run-phases.js [N=8] [--only local|daemon]
 */
import { spawnSync } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Snapshot } from '@forkd/sdk';
import { CLI, startDaemon, stopDaemon, type BenchDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { percentile } from './stats.js';

const args = process.argv.slice(2);
const only = args.includes('--only') ? args[args.indexOf('--only') + 1] : undefined;
const N = Number(args.find((a, i) => /^\d+$/.test(a) && args[i - 1] !== '--only') ?? 8);
const POOL_WAIT_MS = 60_000;

interface Mark {
  at: number;
  pid: number;
  name: string;
}

/** One timed run: its marks between spawn and exit, and its wall-clock ms. */
interface Run {
  marks: Mark[];
  totalMs: number;
}

const now = () => performance.timeOrigin + performance.now();

async function readMarks(file: string): Promise<Mark[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [at, pid, ...name] = line.split(' ');
      return { at: Number(at), pid: Number(pid), name: name.join(' ') };
    });
}

/** `forkd run -- echo hi` once, its marks (both processes') on one timeline. */
async function timedRun(env: NodeJS.ProcessEnv, file: string): Promise<Run> {
  const from = (await readMarks(file)).length;
  const t0 = now();
  const r = spawnSync(process.execPath, [CLI, 'run', '--', 'echo', 'hi'], {
    env: { ...env, FORKD_PHASES: file },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const t1 = now();
  if (r.status !== 0 || r.stdout.toString() !== 'hi\n') {
    throw new Error(`forkd run exited ${r.status}: ${r.stdout} ${r.stderr}`);
  }
  const marks = (await readMarks(file))
    .slice(from)
    .filter((m) => m.at >= t0 && m.at <= t1)
    .sort((a, b) => a.at - b.at);
  return {
    marks: [
      { at: t0, pid: process.pid, name: 'bench: spawned' },
      ...marks,
      { at: t1, pid: process.pid, name: 'bench: exit seen' },
    ],
    totalMs: t1 - t0,
  };
}

/** Per step (a mark, from the mark before it): p50 and count, in a typical run's order. */
function table(label: string, runs: Run[], cliPids: Set<number>): void {
  const steps = new Map<string, number[]>();
  for (const run of runs) {
    run.marks.forEach((m, i) => {
      if (i === 0) return;
      const who = m.pid === process.pid ? 'bench ' : cliPids.has(m.pid) ? 'cli   ' : 'daemon';
      const key = `${who} ${m.name}`;
      const list = steps.get(key) ?? [];
      list.push(m.at - (run.marks[i - 1] as Mark).at);
      steps.set(key, list);
    });
  }
  const totals = runs.map((r) => r.totalMs);
  console.log(
    `\n${label}: end to end p50 ${f(percentile(totals, 50))}, p90 ${f(percentile(totals, 90))} (n=${runs.length})`,
  );
  for (const [step, ms] of steps) {
    console.log(
      `  ${step.padEnd(52)} ${f(percentile(ms, 50)).padStart(9)}  (${ms.length}/${runs.length})`,
    );
  }
}

const f = (ms: number) => `${ms.toFixed(0)} ms`;

function nodeFloor(): number {
  const t0 = now();
  spawnSync(process.execPath, ['-e', '0']);
  return now() - t0;
}

/** The boot snapshot a daemon run forks (said by `run -v`), to wait for its pool. */
function bootTagOf(env: NodeJS.ProcessEnv): string | undefined {
  const r = spawnSync(process.execPath, [CLI, 'run', '-v', '--', 'true'], { env });
  return /boot snapshot (\S+)/.exec(r.stderr.toString())?.[1];
}

async function poolReady(d: BenchDaemon, tag: string | undefined): Promise<void> {
  if (!tag) return sleep(3000);
  const deadline = Date.now() + POOL_WAIT_MS;
  while (Date.now() < deadline) {
    const info = await Snapshot.get(tag, { url: d.url }).catch(() => undefined);
    if (!info || info.info.pool.ready > 0) return;
    await sleep(200);
  }
}

async function main(): Promise<void> {
  const load = () =>
    loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  console.log(`load average at start: ${load()}`);
  // Two homes: a CLI finds the daemon of its home, and a local run must not.
  const home = await makeBenchHome();
  const daemonHome = await makeBenchHome();
  const file = join(home.dir, 'phases.txt');
  await writeFile(file, '');
  const daemon =
    only === 'local'
      ? undefined
      : await startDaemon({ ...daemonHome, env: { ...daemonHome.env, FORKD_PHASES: file } });
  const floor: number[] = [];
  const local: Run[] = [];
  const viaDaemon: Run[] = [];
  try {
    const denv = daemon && { ...daemonHome.env, FORKD_URL: daemon.url };
    // Warm-up: both boot snapshots (none and nat) captured, the daemon's pool started.
    if (only !== 'daemon') await timedRun(home.env, file);
    const tag = denv && bootTagOf(denv);
    for (let i = 0; i < N; i++) {
      floor.push(nodeFloor());
      if (only !== 'daemon') local.push(await timedRun(home.env, file));
      if (daemon && denv) {
        await poolReady(daemon, tag);
        viaDaemon.push(await timedRun(denv, file));
      }
    }
  } finally {
    if (daemon) await stopDaemon(daemon);
    await rm(file, { force: true });
    await home.cleanup();
    await daemonHome.cleanup();
  }
  const cliPids = new Set(
    [...local, ...viaDaemon].map((r) => r.marks.find((m) => m.name === 'process start')?.pid ?? 0),
  );
  console.log(
    `node -e 0 (the floor): p50 ${f(percentile(floor, 50))}, p90 ${f(percentile(floor, 90))}`,
  );
  if (local.length) table('forkd run -- echo hi, no daemon', local, cliPids);
  if (viaDaemon.length) table('forkd run -- echo hi, through the daemon', viaDaemon, cliPids);
  console.log(`\nload average at end: ${load()}`);
}

await main();
