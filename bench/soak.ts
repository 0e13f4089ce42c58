/**
 * Soak benchmark (issue 21): a real `forkd daemon` forks N children of a warm snapshot, runs a
 * command and writes a file in each, kills them, and repeats for a bounded time (default
 * 300 s; the round is workload.ts's `soakRound`). Before the loop and after it (once the
 * daemon is idle) it takes the daemon's RSS and open file descriptors (clients' connections
 * not counted), the home's disk use, the QEMU processes under the home, the host's `fkd-*`
 * network namespaces and MemAvailable, and prints the drift of each; it also samples the
 * daemon every 10 rounds so a slow leak shows as a trend. Target: no drift in fds, disk,
 * QEMUs and namespaces; RSS within a few MiB of the warmed-up baseline.
 * test/e2e/load/load.test.ts runs a short soak in the test suite and asserts on it.
 * Usage: node dist/bench/soak.js [--seconds 300] [--n 2]
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Snapshot } from '@forkd/sdk';
import { startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { sampleDaemon, settledSample, showDrift, showSample, soakRound } from './workload.js';

const { values } = parseArgs({
  options: { seconds: { type: 'string', default: '300' }, n: { type: 'string', default: '2' } },
});
const SECONDS = Number(values.seconds);
const N = Number(values.n);
/** Rounds before the baseline: the daemon's caches, JIT and pools settle. */
const WARMUP_ROUNDS = 3;

async function main(): Promise<void> {
  const home = await makeBenchHome();
  const daemon = await startDaemon(home).catch(async (e: unknown) => {
    await home.cleanup();
    throw e;
  });
  const pid = daemon.child.pid!;
  const take = () => sampleDaemon(pid, home.dir, join(home.dir, 'run', 'forkd.sock'));
  let errors = 0;
  try {
    const snapshot = await Snapshot.create({ url: daemon.url, tag: 'soak', image: 'busybox' });
    for (let i = 0; i < WARMUP_ROUNDS; i++) await soakRound(snapshot, N, -1 - i);
    const base = await settledSample(take);
    console.log(`soak: fork ${N}, exec + file in each, kill; ${SECONDS} s`);
    console.log(`baseline: ${showSample(base)}`);
    const until = Date.now() + SECONDS * 1000;
    let rounds = 0;
    while (Date.now() < until) {
      try {
        await soakRound(snapshot, N, rounds);
      } catch (e) {
        errors++;
        console.log(`round ${rounds} failed: ${String(e)}`);
      }
      rounds++;
      if (rounds % 10 === 0) console.log(`after ${rounds} rounds: ${showSample(await take())}`);
    }
    const back = (s: typeof base) =>
      s.fds <= base.fds && s.qemus <= base.qemus && s.netns <= base.netns;
    const end = await settledSample(take, back);
    console.log(`end (idle): ${showSample(end)}`);
    console.log(
      `drift after ${rounds} rounds (${rounds * N} sandboxes): ${showDrift(base, end)}; errors ${errors}`,
    );
    await snapshot.remove({ force: true });
    process.exitCode = errors === 0 && back(end) ? 0 : 1;
  } finally {
    await stopDaemon(daemon);
    await home.cleanup();
  }
}

await main();
