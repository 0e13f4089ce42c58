/**
 * Starting from an image, forkd against containers, side by side in one run (issue 33;
 * docs/benchmarks.md "forkd run vs podman"). Each round times, one after another so all
 * see the same host load:
 *  - `node -e 0`: the floor any Node CLI pays at this load;
 *  - `forkd run -- echo hi` without a daemon (a restore of the image's boot snapshot in a
 *    fresh QEMU of the CLI's own) and through a daemon (a fork of it: a resume of the
 *    pre-warmed VM its pool holds). The two run on separate homes: a CLI finds the daemon of
 *    its home, so on one home the "no daemon" runs would go through the daemon;
 *  - through the daemon's SDK, `Sandbox.create()` of the image → first `commands.run`;
 *  - E2B's own SDK (`e2b`, test/e2b's package): `Sandbox.create('busybox')`, an image name,
 *    through forkd's E2B listener;
 *  - `podman run --rm` of a busybox image with crun, and with `--runtime runsc` (gVisor).
 * Every daemon start is timed with the boot snapshot's pool holding its pre-warmed VM (a
 * start now and then finds it so; it refills in the background after each take): the
 * bench waits for that before each, and prints how long the refill took.
 * At the end: what the boot snapshot costs — its files on disk (allocated) and in the page
 * cache (fincore), and the memory of the pool's pre-warmed VM.
 * The container image is the host's static busybox, imported with `podman import` (no
 * registry). Every run is end to end: a process started, `hi` printed, everything torn
 * down (forkd's daemon finishes a `run`'s teardown after the CLI exits).
 * crun cannot start here while the cgroup2 hierarchy at /sys/fs/cgroup/unified holds a
 * controller (hybrid mode); its runs go in a private mount namespace with that hierarchy
 * unmounted (the host's mounts are untouched), and the cost of that wrapper alone is timed
 * and printed too. runsc runs with its own network off (no KVM: its systrap platform).
 * Needs podman, crun and runsc on the host (bench-only, not in scripts/setup.sh).
 * Usage: node dist/bench/vs-containers.js [N=10]
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, mkdir, rm, symlink, copyFile, readdir, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox, Snapshot } from '@forkd/sdk';
import { HOST_BUSYBOX } from '../src/services/images/index.js';
import { loadE2b, type E2bModule } from '../test/helpers/e2b-sdk.js';
import { CLI, startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { PODMAN_ULIMITS, requireTools, unifiedHidden } from './podman.js';
import { percentile } from './stats.js';

const N = Number(process.argv[2] ?? 10);
const IMAGE = 'localhost/forkd-bench-busybox:latest';
const TOKEN = 'bench-token-0123456789abcdef0123';
const PODMAN_RUN = ['run', '--rm', '--network', 'none'];
const POOL_WAIT_MS = 120_000;

/** Wall-clock ms of one command to its exit; it must print `hi`. */
function timed(cmd: string, args: string[], env?: NodeJS.ProcessEnv): number {
  const t0 = performance.now();
  const r = spawnSync(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const ms = performance.now() - t0;
  if (r.status !== 0 || !r.stdout.toString().includes('hi')) {
    throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  }
  return ms;
}

async function timedAsync(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const podmanArgs = (runtime: string[]) =>
  [...runtime, ...PODMAN_RUN, ...PODMAN_ULIMITS, IMAGE, '/bin/echo', 'hi'].join(' ');

/** The busybox image for podman, from the host's static busybox. */
async function importImage(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-bench-rootfs-'));
  try {
    await mkdir(join(dir, 'bin'));
    await copyFile(HOST_BUSYBOX, join(dir, 'bin', 'busybox'));
    for (const a of ['sh', 'echo']) await symlink('busybox', join(dir, 'bin', a));
    const tar = join(dir, 'rootfs.tar');
    spawnSync('tar', ['-cf', tar, '-C', dir, 'bin']);
    const r = spawnSync('podman', ['import', tar, IMAGE]);
    if (r.status !== 0) throw new Error(`podman import: ${r.stderr}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

const f = (ms: number) => `${ms.toFixed(0)} ms`;
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
function row(label: string, xs: number[]): void {
  if (xs.length === 0) return;
  const p = (q: number) => f(percentile(xs, q));
  console.log(`${label.padEnd(52)} p50 ${p(50)}  p90 ${p(90)}  (n=${xs.length})`);
}
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

/** The e2b package (test/e2b, installed on first use), or undefined with the reason said. */
async function e2bSdk(): Promise<E2bModule | undefined> {
  try {
    return await loadE2b('e2b');
  } catch (e) {
    console.log(`(E2B SDK not measured: ${e instanceof Error ? e.message : String(e)})`);
    return undefined;
  }
}

/** What the boot snapshot costs: its files on disk and in the page cache. */
async function bootCost(dir: string, tag: string, forkd: { url: string; token: string }) {
  const snap = join(dir, 'snapshots', tag);
  let allocated = 0;
  let apparent = 0;
  for (const name of await readdir(snap)) {
    const st = await stat(join(snap, name));
    allocated += st.blocks * 512;
    apparent += st.size;
  }
  const fin = spawnSync('fincore', [
    '--bytes',
    '--noheadings',
    '--output',
    'RES',
    join(snap, 'memory'),
  ]);
  const cached = Number(fin.stdout.toString().trim()) || 0;
  const pool = (await Snapshot.get(tag, forkd)).info.pool;
  console.log(`\nboot snapshot ${tag}:`);
  console.log(`  files on disk: ${mib(allocated)} allocated (${mib(apparent)} apparent, sparse)`);
  console.log(`  its memory file in the page cache: ${mib(cached)}`);
  console.log(
    `  pool: ${pool.ready}/${pool.size} pre-warmed VM(s), ${pool.memoryBytes === null ? 'not measured' : mib(pool.memoryBytes)} of host memory`,
  );
}

async function main(): Promise<void> {
  requireTools(['podman', 'crun', 'runsc', 'fincore']);
  console.log(`load average at start: ${load()}`);
  const e2b = await e2bSdk();
  await importImage();
  const localHome = await makeBenchHome();
  const home = await makeBenchHome();
  const tokens = join(home.dir, 'tokens');
  await writeFile(tokens, `bench:${TOKEN}\n`, { mode: 0o600 });
  const port = await freePort();
  const daemon = await startDaemon(home, [
    '--token-file',
    tokens,
    '--e2b-listen',
    `127.0.0.1:${port}`,
  ]);
  const forkd = { url: daemon.url, token: TOKEN };
  Object.assign(process.env, {
    E2B_API_KEY: TOKEN,
    E2B_API_URL: `http://127.0.0.1:${port}`,
    E2B_SANDBOX_URL: `http://127.0.0.1:${port}`,
  });
  const rows: Record<string, number[]> = {
    'node printing hi (the floor at this load)': [],
    'forkd run -- echo hi, no daemon (restore)': [],
    'forkd run -- echo hi, daemon (fork: pool resume)': [],
    'SDK Sandbox.create() → first exec (daemon)': [],
    'E2B SDK Sandbox.create("busybox") (E2B listener)': [],
    'podman run --rm, crun': [],
    'podman run --rm, runsc (gVisor)': [],
    '  (crun wrapper alone: unshare + umount)': [],
    '  (pool refill after a take, waited for)': [],
  };
  const [floor, noDaemon, viaDaemon, create, e2bCreate, crun, runsc, wrapper, refill] =
    Object.values(rows) as number[][];
  try {
    const denv = { ...home.env, FORKD_URL: daemon.url, FORKD_TOKEN: TOKEN };
    const forkdRun = (e: NodeJS.ProcessEnv) =>
      timed(process.execPath, [CLI, 'run', '--', 'echo', 'hi'], e);
    const crunRun = () => timed(...unifiedHidden(`exec podman ${podmanArgs([])}`));
    const runscRun = () =>
      timed('sh', [
        '-c',
        `exec podman ${podmanArgs(['--runtime', 'runsc', '--runtime-flag', 'network=none'])}`,
      ]);
    // Warm-up: the boot snapshots (none and nat) are captured, podman's storage is read.
    forkdRun(localHome.env);
    const verbose = spawnSync(process.execPath, [CLI, 'run', '-v', '--', 'true'], { env: denv });
    const tag = /boot snapshot (\S+)/.exec(verbose.stderr.toString())?.[1];
    if (!tag) throw new Error(`no boot snapshot forked: ${verbose.stderr}`);
    crunRun();
    runscRun();
    /** Wait until the pool holds its pre-warmed VM again (the time goes in `refill`). */
    const poolReady = async () => {
      const t0 = performance.now();
      while (performance.now() - t0 < POOL_WAIT_MS) {
        if ((await Snapshot.get(tag, forkd)).info.pool.ready > 0) break;
        await sleep(100);
      }
      refill?.push(performance.now() - t0);
    };
    for (let i = 0; i < N; i++) {
      floor?.push(timed(process.execPath, ['-e', 'console.log("hi")']));
      noDaemon?.push(forkdRun(localHome.env));
      await poolReady();
      viaDaemon?.push(forkdRun(denv));
      await poolReady();
      let sbx: Sandbox | undefined;
      create?.push(
        await timedAsync(async () => {
          sbx = await Sandbox.create(forkd);
          await sbx.commands.run(['echo', 'hi']);
        }),
      );
      await sbx?.kill();
      if (e2b) {
        await poolReady();
        let e: Awaited<ReturnType<E2bModule['Sandbox']['create']>> | undefined;
        e2bCreate?.push(await timedAsync(async () => (e = await e2b.Sandbox.create('busybox'))));
        await e?.kill();
      }
      crun?.push(crunRun());
      runsc?.push(runscRun());
      wrapper?.push(timed(...unifiedHidden('echo hi')));
    }
    console.log();
    for (const [label, xs] of Object.entries(rows)) row(label, xs);
    await bootCost(home.dir, tag, forkd);
  } finally {
    await stopDaemon(daemon);
    await home.cleanup();
    await localHome.cleanup();
    spawnSync('podman', ['rmi', IMAGE]);
  }
  console.log(`load average at end: ${load()}`);
}

await main();
