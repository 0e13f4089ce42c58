/**
 * `forkd run -- echo hi` against containers, side by side in one run (issue 33; docs/
 * benchmarks.md "forkd run vs podman"): each round times, one after another so all see the
 * same host load,
 *  - `forkd run -- echo hi` without a daemon (a restore of the image's boot snapshot in a
 *    fresh QEMU) and through a daemon (a fork of it, a resume from its pool of one);
 *  - `podman run --rm` of a busybox image with crun, and with `--runtime runsc` (gVisor).
 * The container image is the host's static busybox, imported with `podman import` (no
 * registry). Every run is end to end: a process started, `hi` printed, everything torn down.
 * crun cannot start here while the cgroup2 hierarchy at /sys/fs/cgroup/unified holds a
 * controller (hybrid mode); its runs go in a private mount namespace with that hierarchy
 * unmounted (the host's mounts are untouched), and the cost of that wrapper alone is timed
 * and printed too. runsc runs with its own network off (no KVM: its systrap platform).
 * Needs podman, crun and runsc on the host (bench-only, not in scripts/setup.sh).
 * Usage: node dist/bench/vs-containers.js [N=10]
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, mkdir, rm, symlink, copyFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { HOST_BUSYBOX } from '../src/services/images/index.js';
import { CLI, startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { PODMAN_ULIMITS, requireTools, unifiedHidden } from './podman.js';
import { percentile } from './stats.js';

const N = Number(process.argv[2] ?? 10);
const IMAGE = 'localhost/forkd-bench-busybox:latest';
const PODMAN_RUN = ['run', '--rm', '--network', 'none'];

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

const f = (ms: number) => `${ms.toFixed(0)} ms`;
function row(label: string, xs: number[]): void {
  const p = (q: number) => f(percentile(xs, q));
  console.log(`${label.padEnd(46)} p50 ${p(50)}  p90 ${p(90)}  (n=${xs.length})`);
}

async function main(): Promise<void> {
  requireTools(['podman', 'crun', 'runsc']);
  console.log(
    `load average at start: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  await importImage();
  const home = await makeBenchHome();
  const daemon = await startDaemon(home);
  const rows: Record<string, number[]> = {
    'forkd run -- echo hi, no daemon (restore)': [],
    'forkd run -- echo hi, daemon (fork/pool)': [],
    'podman run --rm, crun': [],
    'podman run --rm, runsc (gVisor)': [],
    '  (crun wrapper alone: unshare + umount)': [],
  };
  const [noDaemon, viaDaemon, crun, runsc, wrapper] = Object.values(rows) as number[][];
  try {
    const env = home.env;
    const denv = { ...home.env, FORKD_URL: daemon.url };
    const forkdRun = (e: NodeJS.ProcessEnv) =>
      timed(process.execPath, [CLI, 'run', '--', 'echo', 'hi'], e);
    const crunRun = () => timed(...unifiedHidden(`exec podman ${podmanArgs([])}`));
    const runscRun = () =>
      timed('sh', [
        '-c',
        `exec podman ${podmanArgs(['--runtime', 'runsc', '--runtime-flag', 'network=none'])}`,
      ]);
    // Warm-up: the boot snapshots (none and nat) are captured, podman's storage is read.
    forkdRun(env);
    forkdRun(denv);
    crunRun();
    runscRun();
    for (let i = 0; i < N; i++) {
      noDaemon?.push(forkdRun(env));
      await new Promise((r) => setTimeout(r, 1500)); // the daemon's pool refills after a take
      viaDaemon?.push(forkdRun(denv));
      crun?.push(crunRun());
      runsc?.push(runscRun());
      wrapper?.push(timed(...unifiedHidden('echo hi')));
    }
    for (const [label, xs] of Object.entries(rows)) row(label, xs);
  } finally {
    await stopDaemon(daemon);
    await home.cleanup();
    spawnSync('podman', ['rmi', IMAGE]);
  }
  console.log(
    `load average at end: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
}

await main();
