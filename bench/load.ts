/**
 * Load benchmark (issue 21): C concurrent clients (default 100) against a real `forkd
 * daemon` for a bounded time (default 60 s), each in a loop picking one operation:
 *  - exec  (70 %): `echo` in one of the target sandboxes, buffered;
 *  - files (20 %): write a 4 KiB file into a target, read it back, compare;
 *  - fork   (5 %): fork one child of the warm snapshot, run `true` in it, kill it;
 *  - branch (5 %): branch a target into a new snapshot, then remove that snapshot.
 * Forks and branches boot or capture VMs, which a 2-core TCG host does a few at a time: at
 * most HEAVY of them are in flight, a client finding none free runs an exec instead (so
 * the daemon's `capacity` answer is not what is measured). Prints p50/p99 per operation,
 * the requests held and every error by code; any error makes the exit status 1.
 * Usage: node dist/bench/load.js [--clients 100] [--seconds 60] [--targets 4] [--heavy 2]
 */
import { parseArgs } from 'node:util';
import { isForkdError, Sandbox, Snapshot } from '@forkd/sdk';
import { startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { percentile } from './stats.js';

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

type Op = 'exec' | 'files' | 'fork' | 'branch';
const samples: Record<Op, number[]> = { exec: [], files: [], fork: [], branch: [] };
const errors = new Map<string, number>();
let heavyInFlight = 0;

function pick(): Op {
  const r = Math.random();
  const wanted: Op = r < 0.7 ? 'exec' : r < 0.9 ? 'files' : r < 0.95 ? 'fork' : 'branch';
  if ((wanted === 'fork' || wanted === 'branch') && heavyInFlight >= HEAVY) return 'exec';
  return wanted;
}

const any = <T>(xs: T[]): T => xs[Math.floor(Math.random() * xs.length)]!;

async function once(op: Op, targets: Sandbox[], snapshot: Snapshot, client: number): Promise<void> {
  const sbx = any(targets);
  if (op === 'exec') {
    const r = await sbx.commands.run(['echo', `c${client}`]);
    if (r.exitCode !== 0 || r.stdout !== `c${client}\n`) throw new Error(`exec: ${r.stdout}`);
  } else if (op === 'files') {
    const body = Buffer.alloc(4096, client % 256);
    const path = `/tmp/load-${client}.bin`;
    await sbx.files.write(path, body);
    const back = Buffer.from(await sbx.files.read(path));
    if (!back.equals(body)) throw new Error('files: read back differs');
  } else if (op === 'fork') {
    const { sandboxes, failed } = await snapshot.fork({ n: 1 });
    if (failed[0]) throw failed[0].error;
    for (const child of sandboxes) {
      await child.commands.run(['true']);
      await child.kill();
    }
  } else {
    const { snapshot: branched } = await sbx.branch();
    await branched.remove();
  }
}

async function client(i: number, until: number, targets: Sandbox[], snapshot: Snapshot) {
  while (Date.now() < until) {
    const op = pick();
    const heavy = op === 'fork' || op === 'branch';
    if (heavy) heavyInFlight++;
    const t0 = performance.now();
    try {
      await once(op, targets, snapshot, i);
      samples[op].push(performance.now() - t0);
    } catch (e) {
      const code = isForkdError(e) ? e.code : String(e).slice(0, 80);
      errors.set(`${op}: ${code}`, (errors.get(`${op}: ${code}`) ?? 0) + 1);
    } finally {
      if (heavy) heavyInFlight--;
    }
  }
}

function line(label: string, xs: number[]): string {
  if (xs.length === 0) return `${label}: none`;
  const f = (n: number) => `${n.toFixed(1)} ms`;
  return `${label}: n=${xs.length}, p50 ${f(percentile(xs, 50))}, p99 ${f(percentile(xs, 99))}, max ${f(Math.max(...xs))}`;
}

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
    const t0 = Date.now();
    const until = t0 + SECONDS * 1000;
    await Promise.all(
      Array.from({ length: CLIENTS }, (_, i) => client(i, until, targets, snapshot)),
    );
    const wall = (Date.now() - t0) / 1000;
    const all = Object.values(samples).flat();
    for (const op of Object.keys(samples) as Op[]) console.log(line(op, samples[op]));
    console.log(line('all', all));
    const failures = [...errors.values()].reduce((a, b) => a + b, 0);
    console.log(
      `requests held: ${all.length} in ${wall.toFixed(1)} s (${(all.length / wall).toFixed(1)}/s), errors: ${failures}`,
    );
    for (const [what, n] of errors) console.log(`  error ${what}: ${n}`);
    // Killed fork children stay listed as `dead`; only running ones would be leaks.
    const left = await Sandbox.list({ url, state: 'running' });
    console.log(`sandboxes after the run: ${left.length} (the ${TARGETS} targets)`);
    for (const t of targets) await t.kill();
    await snapshot.remove({ force: true });
    process.exitCode = failures === 0 && left.length === TARGETS ? 0 : 1;
  } finally {
    await stopDaemon(daemon);
    await home.cleanup();
  }
}

await main();
