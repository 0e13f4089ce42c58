/**
 * Idle tiers benchmark (docs/idle.md), through a real `forkd daemon` and the SDK, one
 * sandbox: the CPU its QEMU uses over 5 s awake and idle vs paused, `exec true` p50 on an
 * awake sandbox, and the first `exec true` after a pause (wake = `cont` + clock push +
 * the exec), N times (default 20); then hibernation, H times (default 5): `POST /pause`
 * with tier hibernated, the first `exec true` after it (restore + clock push + the exec),
 * and what the hibernated sandbox keeps on disk (allocated bytes, its files).
 * Usage: node dist/bench/idle.js [N] [H]
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox } from '@forkd/sdk';
import { startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { summary } from './stats.js';

const N = Number(process.argv[2] ?? 20);
const H = Number(process.argv[3] ?? 5);

/** Allocated bytes of each file under `dir` (sparse files count what they hold). */
async function allocated(dir: string, prefix = ''): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) Object.assign(out, await allocated(path, `${prefix}${e.name}/`));
    else if (e.isFile()) out[`${prefix}${e.name}`] = (await stat(path)).blocks * 512;
  }
  return out;
}

const mib = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`;

async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** Share of one core the process used over `ms`. */
async function cpuShare(pid: number, ms: number): Promise<string> {
  const before = await cpuSeconds(pid);
  await sleep(ms);
  return `${((((await cpuSeconds(pid)) - before) * 1000 * 100) / ms).toFixed(1)} % of a core`;
}

async function timed(call: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await call();
  return performance.now() - t0;
}

const home = await makeBenchHome();
const daemon = await startDaemon(home);
try {
  const sbx = await Sandbox.create({ url: daemon.url, image: 'busybox', memoryMib: 256 });
  const pid = sbx.info.pid as number;
  const run = async () => {
    const r = await sbx.commands.run(['true']);
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
  };
  for (let i = 0; i < 5; i++) await run();
  await sleep(1000);
  console.log(`idle awake: ${await cpuShare(pid, 5000)}`);
  await sbx.pause();
  console.log(`paused: ${await cpuShare(pid, 5000)}`);
  await sbx.resume();
  const awake: number[] = [];
  for (let i = 0; i < N; i++) awake.push(await timed(run));
  console.log(`exec true, awake: ${summary(awake)}`);
  const woken: number[] = [];
  const pauses: number[] = [];
  for (let i = 0; i < N; i++) {
    pauses.push(await timed(() => sbx.pause()));
    await sleep(200);
    woken.push(await timed(run));
  }
  console.log(`pause (POST /pause): ${summary(pauses)}`);
  console.log(`first exec true from paused (wake + exec): ${summary(woken)}`);
  const hibernations: number[] = [];
  const restored: number[] = [];
  for (let i = 0; i < H; i++) {
    hibernations.push(await timed(() => sbx.pause({ tier: 'hibernated' })));
    await sleep(200);
    restored.push(await timed(run));
  }
  console.log(`hibernate (POST /pause tier hibernated): ${summary(hibernations)}`);
  console.log(`first exec true from hibernated (restore + exec): ${summary(restored)}`);
  await sbx.pause({ tier: 'hibernated' });
  const files = await allocated(join(home.paths.sandboxes, sbx.id));
  const total = Object.values(files).reduce((a, b) => a + b, 0);
  const big = Object.entries(files)
    .filter(([, b]) => b >= 64 * 1024)
    .map(([f, b]) => `${f} ${mib(b)}`);
  console.log(`hibernated on disk (256 MiB guest): ${mib(total)} in all; ${big.join(', ')}`);
  await sbx.kill();
} finally {
  await stopDaemon(daemon);
  await home.cleanup();
}
