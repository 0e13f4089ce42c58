/**
 * Build benchmark (issue 36, docs/build.md "Measured"): a Python template — the image
 * forkd-test-python (numpy installed), a COPY of a script, a RUN that byte-compiles it, a
 * warm interpreter that imports numpy started with `# forkd:start` — built under the
 * daemon's real services, in-process: the first build, a rebuild with nothing changed, a
 * rebuild with only the last step edited. Prints each build's wall time and each step's
 * status, time and the disk its snapshot takes; then the time from a fork to the warm server.
 * With --podman, the same template built by `podman build` (crun, cached layers) from the
 * same image, imported into podman: the same three builds, each step's time and whether it
 * was cached, the time from `podman run` to the server's ready file, and the layer sizes.
 * Usage: node dist/bench/build.js [--podman]
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { forkdHome, paths } from '../src/config.js';
import type { BuildResult } from '../src/services/contracts.js';
import { importExt4, podman, PODMAN_ULIMITS, requireTools, unifiedHidden } from './podman.js';
import { caller, startBenchServices, type BenchServices } from './services.js';

const IMAGE = 'forkd-test-python';
/** The same image in podman's store, and the template podman builds from it. */
const PODMAN_BASE = 'localhost/forkd-bench-python:latest';
const PODMAN_TAG = 'localhost/forkd-bench-pytpl:latest';
const SERVER = `import numpy, os, time
open('/tmp/ready', 'w').write(str(numpy.ones(3).sum()))
while True: time.sleep(3600)
`;

/** The template's steps from `from`, ending with `last` (how each tool starts the server). */
function template(from: string, last: string): string {
  return [
    `FROM ${from}`,
    'WORKDIR /app',
    'COPY srv.py ./',
    'RUN python3 -m py_compile srv.py',
    last,
  ].join('\n');
}

const dockerfile = (marker: string) =>
  template(IMAGE, `# forkd:start --wait-file=/tmp/ready --timeout=600 python3 srv.py ${marker}`);

function show(name: string, r: BuildResult): void {
  console.log(`${name}: ${(r.duration_ms / 1000).toFixed(1)} s`);
  for (const s of r.steps) {
    const disk = s.disk_bytes ? ` ${(s.disk_bytes / 1048576).toFixed(1)} MiB` : '';
    console.log(
      `  step ${s.step} ${s.status.padEnd(6)} ${(s.duration_ms / 1000).toFixed(1)} s${disk}  ${s.instruction}`,
    );
  }
}

/** The same template for podman: forkd's start directive becomes the image's CMD. */
const containerfile = (marker: string) =>
  template(PODMAN_BASE, `CMD ["python3", "srv.py", "${marker}"]`);

/** A build's steps as podman prints them: `STEP i/n: …`, then `--> Using cache` on a hit. */
interface PodmanStep {
  instruction: string;
  cached: boolean;
  ms: number;
}

/** `podman build` of `dir` (in the crun wrapper), timing each step from its STEP line. */
function podmanBuild(dir: string, extra: string[]): Promise<{ ms: number; steps: PodmanStep[] }> {
  const args = ['build', '--layers', ...extra, '--network', 'none', '-t', PODMAN_TAG, dir];
  const [cmd, argv] = unifiedHidden(`exec podman ${args.join(' ')}`);
  const steps: PodmanStep[] = [];
  const t0 = performance.now();
  let mark = t0;
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines = createInterface({ input: child.stdout });
  lines.on('line', (line) => {
    const step = /^STEP \d+\/\d+: (.*)$/.exec(line);
    const now = performance.now();
    if (step) {
      const last = steps.at(-1);
      if (last) last.ms = now - mark;
      mark = now;
      steps.push({ instruction: step[1] ?? '', cached: false, ms: 0 });
    } else if (line.startsWith('--> Using cache')) {
      const last = steps.at(-1);
      if (last) last.cached = true;
    }
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    child.on('close', (code) => {
      const end = performance.now();
      const last = steps.at(-1);
      if (last) last.ms = end - mark;
      if (code === 0) resolve({ ms: end - t0, steps });
      else reject(new Error(`podman build exited ${code}: ${stderr}`));
    });
  });
}

function showPodman(name: string, r: { ms: number; steps: PodmanStep[] }): void {
  console.log(`${name}: ${(r.ms / 1000).toFixed(1)} s`);
  r.steps.forEach((s, i) => {
    const status = s.cached ? 'CACHED' : 'built';
    console.log(
      `  step ${i + 1} ${status.padEnd(6)} ${(s.ms / 1000).toFixed(1)} s  ${s.instruction}`,
    );
  });
}

/** Seconds from `podman run -d` of the template to its server's ready file. */
async function podmanReady(): Promise<number> {
  const t0 = performance.now();
  const id = podman(['run', '-d', '--network', 'none', ...PODMAN_ULIMITS, PODMAN_TAG]).trim();
  try {
    for (let i = 0; i < 1200; i++) {
      const [cmd, argv] = unifiedHidden(`exec podman exec ${id} cat /tmp/ready`);
      if (spawnSync(cmd, argv).status === 0) return (performance.now() - t0) / 1000;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('the podman container never wrote /tmp/ready');
  } finally {
    podman(['rm', '-f', '-t', '0', id]);
  }
}

/** Seconds from a fork of the built snapshot to reading its server's ready file. */
async function forkdReady(set: BenchServices): Promise<number> {
  const t0 = performance.now();
  const r = await set.snapshots.fork({ snapshot: 'pytpl', n: 1 }, caller);
  const id = r.sandboxes[0]?.id as string;
  try {
    const res = await set.sandboxes.exec(id, { argv: ['cat', '/tmp/ready'] });
    if (res.exit_code !== 0) throw new Error(`the fork has no /tmp/ready: ${res.stderr}`);
    return (performance.now() - t0) / 1000;
  } finally {
    await set.sandboxes.kill(id);
  }
}

const ratio = (again: number, first: number) => `${((100 * again) / first).toFixed(1)} %`;

async function forkdSide(dir: string): Promise<void> {
  const set = await startBenchServices([IMAGE], { defaultPool: 0 });
  try {
    const run = async (marker: string) =>
      set.builds.buildDir(
        { dockerfile: dockerfile(marker), context: dir, tag: 'pytpl', memory_mib: 512 },
        caller,
      );
    const first = await run('a');
    show('first build', first);
    const again = await run('a');
    show('no-change rebuild', again);
    console.log(`  rebuild / first: ${ratio(again.duration_ms, first.duration_ms)}`);
    show('last-step edit', await run('b'));
    console.log(`fork → warm server ready: ${(await forkdReady(set)).toFixed(2)} s`);
  } finally {
    await set.close();
  }
}

async function podmanSide(dir: string): Promise<void> {
  requireTools(['podman', 'crun']);
  console.log('\n== podman build (crun, --layers), the same steps; the start is the CMD ==');
  const base = paths(forkdHome()).images;
  importExt4(join(base, IMAGE, 'rootfs.ext4'), PODMAN_BASE);
  try {
    await writeFile(join(dir, 'Containerfile'), containerfile('a'));
    const first = await podmanBuild(dir, ['--no-cache']);
    showPodman('first build', first);
    const again = await podmanBuild(dir, []);
    showPodman('no-change rebuild', again);
    console.log(`  rebuild / first: ${ratio(again.ms, first.ms)}`);
    await writeFile(join(dir, 'Containerfile'), containerfile('b'));
    showPodman('last-step edit', await podmanBuild(dir, []));
    console.log(`run → warm server ready: ${(await podmanReady()).toFixed(2)} s`);
    console.log('layers (podman history):');
    console.log(podman(['history', '--format', '  {{.Size}}\t{{.CreatedBy}}', PODMAN_TAG]));
  } finally {
    for (const ref of [PODMAN_TAG, PODMAN_BASE]) {
      spawnSync(...unifiedHidden(`podman rmi -f ${ref} >/dev/null 2>&1`));
    }
  }
}

async function main(): Promise<void> {
  const withPodman = process.argv.includes('--podman');
  console.log(
    `load average at start: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  const dir = await mkdtemp(join(tmpdir(), 'forkd-bench-build-'));
  try {
    await writeFile(join(dir, 'srv.py'), SERVER);
    await writeFile(join(dir, '.dockerignore'), 'Containerfile\n');
    await forkdSide(dir);
    if (withPodman) await podmanSide(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  console.log(
    `load average at end: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
}

await main();
