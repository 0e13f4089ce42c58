/**
 * Soak benchmark (issue 21): a real `forkd daemon` forks N children of a warm snapshot, runs a
 * command and writes a file in each, kills them, and repeats for a bounded time (default
 * 300 s). Before the loop and after it (once the daemon is idle) it takes the daemon's RSS
 * and open file descriptors, the home's disk use, the QEMU processes under the home, the
 * host's `fkd-*` network namespaces and MemAvailable, and prints the drift of each; it also
 * samples the daemon every round so a slow leak shows as a trend. Target: no drift in fds,
 * disk, QEMUs and namespaces; RSS within a few MiB of the warmed-up baseline.
 * Usage: node dist/bench/soak.js [--seconds 300] [--n 2]
 */
import { readdir, readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Snapshot } from '@forkd/sdk';
import { run } from '../src/util/exec.js';
import { startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';

const { values } = parseArgs({
  options: { seconds: { type: 'string', default: '300' }, n: { type: 'string', default: '2' } },
});
const SECONDS = Number(values.seconds);
const N = Number(values.n);
/** Rounds before the baseline: the daemon's caches, JIT and pools settle. */
const WARMUP_ROUNDS = 3;

interface Sample {
  rssKiB: number;
  fds: number;
  diskKiB: number;
  qemus: number;
  netns: number;
  availKiB: number;
}

async function statusKiB(pid: number, field: string): Promise<number> {
  const text = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
}

async function qemusUnder(dir: string): Promise<number> {
  let n = 0;
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const cmd = await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '');
    if (cmd.startsWith('qemu-system') && cmd.includes(dir)) n++;
  }
  return n;
}

async function sample(pid: number, home: string): Promise<Sample> {
  const meminfo = await readFile('/proc/meminfo', 'utf8');
  const du = await run('du', ['-sk', '--apparent-size', home]);
  const netns = await readdir('/run/netns').catch(() => [] as string[]);
  return {
    rssKiB: await statusKiB(pid, 'VmRSS'),
    fds: (await readdir(`/proc/${pid}/fd`)).length,
    diskKiB: Number(du.stdout.split('\t')[0]),
    qemus: await qemusUnder(home),
    netns: netns.filter((n) => n.startsWith('fkd-')).length,
    availKiB: Number(/^MemAvailable:\s+(\d+)/m.exec(meminfo)?.[1] ?? NaN),
  };
}

const show = (s: Sample) =>
  `rss ${(s.rssKiB / 1024).toFixed(1)} MiB, fds ${s.fds}, disk ${(s.diskKiB / 1024).toFixed(1)} MiB, qemus ${s.qemus}, fkd netns ${s.netns}, host MemAvailable ${(s.availKiB / 1024).toFixed(0)} MiB`;

async function round(snapshot: Snapshot, i: number): Promise<void> {
  const { sandboxes, failed } = await snapshot.fork({ n: N });
  try {
    if (failed[0]) throw failed[0].error;
    for (const child of sandboxes) {
      await child.files.write('/tmp/soak.txt', `round ${i}\n`);
      const r = await child.commands.run(['cat', '/tmp/soak.txt']);
      if (r.stdout !== `round ${i}\n`) throw new Error(`round ${i}: read ${r.stdout}`);
    }
  } finally {
    for (const child of sandboxes) await child.kill();
  }
}

/** Lets the daemon finish reaping and refilling after the last kill. */
async function settle(): Promise<void> {
  await sleep(5000);
}

async function main(): Promise<void> {
  const home = await makeBenchHome();
  const daemon = await startDaemon(home).catch(async (e: unknown) => {
    await home.cleanup();
    throw e;
  });
  const pid = daemon.child.pid!;
  let errors = 0;
  try {
    const snapshot = await Snapshot.create({ url: daemon.url, tag: 'soak', image: 'busybox' });
    for (let i = 0; i < WARMUP_ROUNDS; i++) await round(snapshot, -1 - i);
    await settle();
    const base = await sample(pid, home.dir);
    console.log(`soak: fork ${N}, exec + file in each, kill; ${SECONDS} s`);
    console.log(`baseline: ${show(base)}`);
    const until = Date.now() + SECONDS * 1000;
    let rounds = 0;
    while (Date.now() < until) {
      try {
        await round(snapshot, rounds);
      } catch (e) {
        errors++;
        console.log(`round ${rounds} failed: ${String(e)}`);
      }
      rounds++;
      if (rounds % 10 === 0)
        console.log(`after ${rounds} rounds: ${show(await sample(pid, home.dir))}`);
    }
    await settle();
    const end = await sample(pid, home.dir);
    console.log(`end (idle): ${show(end)}`);
    console.log(
      `drift after ${rounds} rounds (${rounds * N} sandboxes): rss ${((end.rssKiB - base.rssKiB) / 1024).toFixed(1)} MiB, ` +
        `fds ${end.fds - base.fds}, disk ${((end.diskKiB - base.diskKiB) / 1024).toFixed(1)} MiB, ` +
        `qemus ${end.qemus - base.qemus}, fkd netns ${end.netns - base.netns}, ` +
        `host MemAvailable ${((end.availKiB - base.availKiB) / 1024).toFixed(0)} MiB; errors ${errors}`,
    );
    const leaked = end.fds > base.fds || end.qemus > base.qemus || end.netns > base.netns;
    await snapshot.remove({ force: true });
    process.exitCode = errors === 0 && !leaked ? 0 : 1;
  } finally {
    await stopDaemon(daemon);
    await home.cleanup();
  }
}

await main();
