/**
 * CLI benchmark: what a user (or an agent shelling out) pays per `forkd` call, and how fast
 * `forkd cp` moves a file each way.
 *  - Start-up, paired: N times, `node -e 0` then the verb, one right after the other, so
 *    both see the same host load; the difference of each pair is what forkd adds on top of
 *    starting Node. Verbs: `forkd version` (no daemon), `forkd ps` and
 *    `forkd exec ID -- true` against a real daemon with one running sandbox.
 *  - cp: a 20 MB random file up (`forkd cp FILE ID:/root/big`) and down again, R times,
 *    each copy checked byte for byte (sha256).
 * With `--before CLI` (another build's dist/src/cli/main.js) each start-up row is measured
 * for both CLIs, their pairs interleaved, so before and after see the same host load.
 * Usage: node dist/bench/cli.js [N=30] [R=3] [--before PATH]
 * It uses a temp FORKD_HOME linked to the set-up home's kernel and busybox image.
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Sandbox } from '@forkd/sdk';
import { CLI, startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { percentile } from './stats.js';

const flag = process.argv.indexOf('--before');
const BEFORE = flag > 0 ? process.argv[flag + 1] : undefined;
const [n, r] = process.argv
  .slice(2)
  .filter((a, i, all) => a !== '--before' && all[i - 1] !== '--before');
const N = Number(n ?? 30);
const R = Number(r ?? 3);
const CP_BYTES = 20 * 1000 * 1000;

/** Wall-clock ms of one process run to its exit; a failing run aborts the benchmark. */
function timed(args: string[], env: NodeJS.ProcessEnv): number {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  const ms = performance.now() - t0;
  if (r.status !== 0) throw new Error(`${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return ms;
}

const f = (n: number) => `${n.toFixed(1)} ms`;
const stats = (xs: number[]) => `p50 ${f(percentile(xs, 50))}, p90 ${f(percentile(xs, 90))}`;

/** One CLI's samples of a verb and of the `node -e 0` run just before each. */
interface Pairs {
  label: string;
  cli: string;
  base: number[];
  verb: number[];
}

/**
 * N pairs (node -e 0, the verb) for each CLI, the CLIs' pairs interleaved; prints each
 * CLI's verb, its baseline and the per-pair difference.
 */
function paired(label: string, args: string[], env: NodeJS.ProcessEnv): void {
  const clis: Pairs[] = [{ label, cli: CLI, base: [], verb: [] }];
  if (BEFORE) clis.push({ label: `${label} (before)`, cli: BEFORE, base: [], verb: [] });
  for (const c of clis) timed([c.cli, ...args], env); // warm the page cache
  for (let i = 0; i < N; i++) {
    for (const c of clis) {
      c.base.push(timed(['-e', '0'], env));
      c.verb.push(timed([c.cli, ...args], env));
    }
  }
  for (const c of clis) {
    const diff = c.verb.map((v, i) => v - (c.base[i] as number));
    console.log(
      `${c.label}: ${stats(c.verb)} | node -e 0: ${stats(c.base)} | difference: ${stats(diff)} (n=${N})`,
    );
  }
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** R uploads and downloads of a 20 MB file through the CLI, each checked. */
async function copies(dir: string, id: string, env: NodeJS.ProcessEnv): Promise<void> {
  const data = randomBytes(CP_BYTES);
  const src = join(dir, 'big.bin');
  const back = join(dir, 'back.bin');
  await writeFile(src, data);
  const up: number[] = [];
  const down: number[] = [];
  for (let i = 0; i < R; i++) {
    up.push(timed([CLI, 'cp', src, `${id}:/root/big.bin`], env));
    down.push(timed([CLI, 'cp', `${id}:/root/big.bin`, back], env));
    if (sha(await readFile(back)) !== sha(data)) throw new Error('the copy differs');
  }
  const rate = (ms: number) => `${(CP_BYTES / 1e6 / (ms / 1000)).toFixed(1)} MB/s`;
  for (const [label, xs] of [
    ['up', up],
    ['down', down],
  ] as const) {
    const p50 = percentile(xs, 50);
    console.log(
      `cp 20 MB ${label}: p50 ${(p50 / 1000).toFixed(2)} s (${rate(p50)}), min ${(Math.min(...xs) / 1000).toFixed(2)} s, max ${(Math.max(...xs) / 1000).toFixed(2)} s (n=${R}, sha256 equal)`,
    );
  }
}

async function main(): Promise<void> {
  console.log(`forkd CLI: start-up (N=${N} pairs) and cp (R=${R}), ${new Date().toISOString()}`);
  const home = await makeBenchHome(['busybox']);
  const daemon = await startDaemon(home).catch(async (e: unknown) => {
    await home.cleanup();
    throw e;
  });
  const env = { ...home.env, FORKD_URL: daemon.url };
  let sandbox: Sandbox | undefined;
  try {
    sandbox = await Sandbox.create({ url: daemon.url, image: 'busybox', memoryMib: 256 });
    paired('forkd version', ['version'], env);
    paired('forkd ps', ['ps'], env);
    paired('forkd exec ID -- true', ['exec', sandbox.id, '--', 'true'], env);
    await copies(home.dir, sandbox.id, env);
  } finally {
    await sandbox?.kill().catch(() => {});
    await stopDaemon(daemon);
    await home.cleanup();
  }
}

await main();
