/**
 * Boot snapshots benchmark (docs/snapshots.md "Boot snapshots"): what a start from an image
 * costs with a cold boot (`--cold`) and with a fork of the image's boot snapshot, side by
 * side in one run, the two kinds interleaved so both see the same host load.
 *  - `forkd run -- echo hi` end to end (node start, start, exec, teardown) without a daemon
 *    (a restore in a fresh QEMU) and through a daemon (a fork, a resume from its pool);
 *  - `create` → first exec answered (`Sandbox.create` then `commands.run('true')`), daemon;
 *  - what a boot snapshot costs: its files on disk (logical, allocated) and its memory file
 *    in the page cache after the forks (fincore).
 * Usage: node dist/bench/boot-snapshots.js [N=10]
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { Sandbox, Snapshot } from '@forkd/sdk';
import { CLI, startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { percentile } from './stats.js';

const N = Number(process.argv[2] ?? 10);

/** Wall-clock ms of one `forkd …` to its exit; a failing run aborts the benchmark. */
function timedCli(args: string[], env: NodeJS.ProcessEnv): number {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const ms = performance.now() - t0;
  if (r.status !== 0) throw new Error(`forkd ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return ms;
}

const f = (ms: number) => `${ms.toFixed(0)} ms`;
const row = (label: string, xs: number[]) =>
  console.log(
    `${label.padEnd(44)} p50 ${f(percentile(xs, 50))}  p90 ${f(percentile(xs, 90))}  (n=${xs.length})`,
  );
const mib = (b: number) => `${(b / 1048576).toFixed(1)} MiB`;

/** `forkd run -- echo hi`, cold and from the boot snapshot, interleaved. */
function runs(label: string, env: NodeJS.ProcessEnv): void {
  timedCli(['run', '--', 'echo', 'hi'], env); // the first run captures the boot snapshot
  const cold: number[] = [];
  const warm: number[] = [];
  for (let i = 0; i < N; i++) {
    cold.push(timedCli(['run', '--cold', '--', 'echo', 'hi'], env));
    warm.push(timedCli(['run', '--', 'echo', 'hi'], env));
  }
  row(`forkd run -- echo hi, ${label}, --cold`, cold);
  row(`forkd run -- echo hi, ${label}, boot snapshot`, warm);
}

/** `Sandbox.create` → first `commands.run` answered, cold and from the boot snapshot. */
async function createToExec(url: string): Promise<void> {
  const one = async (cold: boolean) => {
    const t0 = performance.now();
    const sb = await Sandbox.create({ url, cold, memoryMib: 256 });
    await sb.commands.run('true');
    const ms = performance.now() - t0;
    await sb.kill();
    return ms;
  };
  await one(false); // captured already by the runs; this one fills the pool
  const cold: number[] = [];
  const warm: number[] = [];
  for (let i = 0; i < N; i++) {
    cold.push(await one(true));
    await new Promise((r) => setTimeout(r, 1500)); // the pool refills after a take
    warm.push(await one(false));
  }
  row('create → first exec, --cold', cold);
  row('create → first exec, boot snapshot', warm);
}

/** The boot snapshot's files on disk and its memory file's pages in the page cache. */
async function cost(url: string, snapshotsDir: string): Promise<void> {
  const images = await new (await import('@forkd/sdk')).Forkd({ url }).images.list();
  for (const b of images.flatMap((i) => i.bootSnapshots ?? [])) {
    const snap = await Snapshot.get(b.tag, { url });
    const memory = snap.info.files.find((x) => x.name === 'memory');
    const cached = spawnSync('fincore', [
      '-b',
      '-n',
      '-o',
      'RES',
      join(snapshotsDir, b.tag, 'memory'),
    ]);
    console.log(
      `boot snapshot ${b.tag} (${b.memoryMib} MiB guest, network ${b.network}): ` +
        `files ${mib(snap.info.logicalBytes)} logical, ${mib(b.physicalBytes)} on disk ` +
        `(memory ${mib(memory?.allocated ?? 0)}); memory file in page cache ${mib(Number(cached.stdout.toString().trim()) || 0)}`,
    );
  }
}

async function main(): Promise<void> {
  const home = await makeBenchHome();
  try {
    runs('no daemon', home.env);
    const daemon = await startDaemon(home);
    try {
      const env = { ...home.env, FORKD_URL: daemon.url };
      runs('daemon', env);
      await createToExec(daemon.url);
      await cost(daemon.url, home.paths.snapshots);
    } finally {
      await stopDaemon(daemon);
    }
  } finally {
    await home.cleanup();
  }
}

await main();
