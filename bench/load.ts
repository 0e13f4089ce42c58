/**
 * Load benchmark (issue 21): C concurrent clients (default 100) against a real `forkd
 * daemon` for a bounded time (default 60 s), running the load mix of workload.ts (exec 70 %,
 * files 20 %, fork 5 %, branch 5 %; at most HEAVY forks or branches in flight) over TARGETS
 * forked sandboxes. Prints p50/p99 per operation, the requests held and every error by code;
 * any error, or a sandbox other than the targets left running, makes the exit status 1.
 * test/e2e/load/load.test.ts runs the same mix for a few seconds in the test suite.
 * Usage: node dist/bench/load.js [--clients 100] [--seconds 60] [--targets 4] [--heavy 2]
 */
import { parseArgs } from 'node:util';
import { Sandbox, Snapshot } from '@forkd/sdk';
import { startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { loadReport, runLoad } from './workload.js';

const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '100' },
    seconds: { type: 'string', default: '60' },
    targets: { type: 'string', default: '4' },
    heavy: { type: 'string', default: '2' },
  },
});
const CLIENTS = Number(values.clients);
const SECONDS = Number(values.seconds);
const TARGETS = Number(values.targets);
const HEAVY = Number(values.heavy);

async function main(): Promise<void> {
  const home = await makeBenchHome();
  const daemon = await startDaemon(home).catch(async (e: unknown) => {
    await home.cleanup();
    throw e;
  });
  const url = daemon.url;
  try {
    const snapshot = await Snapshot.create({ url, tag: 'load', image: 'busybox' });
    const { sandboxes: targets, failed } = await snapshot.fork({ n: TARGETS });
    if (failed[0]) throw failed[0].error;
    console.log(
      `load: ${CLIENTS} clients for ${SECONDS} s over ${TARGETS} forked targets (heavy ops ≤ ${HEAVY} at once)`,
    );
    const result = await runLoad({
      clients: CLIENTS,
      seconds: SECONDS,
      heavy: HEAVY,
      targets,
      snapshot,
    });
    for (const l of loadReport(result)) console.log(l);
    // Killed fork children stay listed as `dead`; only running ones would be leaks.
    const left = await Sandbox.list({ url, state: 'running' });
    console.log(`sandboxes after the run: ${left.length} (the ${TARGETS} targets)`);
    for (const t of targets) await t.kill();
    await snapshot.remove({ force: true });
    process.exitCode = result.errors.size === 0 && left.length === TARGETS ? 0 : 1;
  } finally {
    await stopDaemon(daemon);
    await home.cleanup();
  }
}

await main();
