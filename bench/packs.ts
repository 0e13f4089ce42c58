/**
 * Packs benchmark (issue 15): time and bytes of pack, unpack, push and pull of a busybox
 * snapshot (`base`, warmed with a running counter), and of the incremental push of a
 * branch over it (`step`, a fork that wrote MIB MiB): what it uploads against a full push,
 * then the pull of the branch alone onto a host without either (its parent comes along).
 * Uses a `docker-registry` on loopback (the test helper's).
 * Usage: node dist/bench/packs.js [MIB=16] [IMAGES=busybox]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PackManager } from '../src/services/packs/service.js';
import { startRegistry } from '../test/e2e/images/registry.js';
import { caller, startBenchServices, type BenchServices } from './services.js';

const MIB = Number(process.argv[2] ?? 16);
const IMAGES = (process.argv[3] ?? 'busybox').split(',');
const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;

async function timed<T>(label: string, f: () => Promise<T>, bytes: (r: T) => string): Promise<T> {
  const t0 = performance.now();
  const r = await f();
  console.log(
    `  ${label.padEnd(34)} ${(performance.now() - t0).toFixed(0).padStart(6)} ms  ${bytes(r)}`,
  );
  return r;
}

async function bench(env: BenchServices, image: string, registry: string, dir: string) {
  const packs = env.services.packs as PackManager;
  console.log(`image ${image}:`);
  await env.snapshots.create(
    {
      tag: 'base',
      image,
      start: ['i=0; while true; do i=$((i+1)); echo $i > /tmp/c; sleep 1; done'],
    },
    caller,
  );
  const kid = (await env.snapshots.fork({ snapshot: 'base', n: 1 }, caller)).sandboxes[0]!.id;
  const fill = `dd if=/dev/urandom of=/tmp/blob bs=1048576 count=${MIB} 2>/dev/null && sync`;
  const filled = await env.sandboxes.exec(kid, { argv: ['sh', '-c', fill] });
  if (filled.exit_code !== 0) throw new Error(`${fill}: exit ${filled.exit_code}`);
  await env.branch.branch(kid, { tag: 'step' }, caller);
  await env.sandboxes.kill(kid);

  const file = join(dir, `${image}.forkd.tar.zst`);
  const p = await timed(
    'pack step (chain + image)',
    () => packs.pack('step', file),
    (r) => `${mib(r.bytes)} file, ${mib(r.logical_bytes)} logical`,
  );
  await env.snapshots.remove('base', { cascade: true });
  await timed(
    'unpack',
    () => packs.unpack(file),
    () => `${mib(p.bytes)} read`,
  );
  const repo = `${registry}/bench/${image}`;
  const full = await timed(
    'push base (empty registry)',
    () => packs.push('base', `${repo}:base`),
    (r) => `${mib(r.bytes_uploaded)} up, ${r.uploaded} blobs`,
  );
  await timed(
    'push step (branch of pushed base)',
    () => packs.push('step', `${repo}:step`),
    (r) =>
      `${mib(r.bytes_uploaded)} up (${((100 * r.bytes_uploaded) / full.bytes_uploaded).toFixed(1)} % of base), ${r.uploaded} up, ${r.skipped} skipped`,
  );
  await timed(
    'push step to another repo (mount)',
    () => packs.push('step', `${registry}/bench/other:step`),
    (r) => `${mib(r.bytes_uploaded)} up, ${r.mounted} mounted`,
  );
  await env.snapshots.remove('base', { cascade: true });
  await timed(
    'pull step (brings base)',
    () => packs.pull({ reference: `${repo}:step` }),
    (r) => `${mib(r.bytes_downloaded)} down, installed ${r.installed.join(',')}`,
  );
  await env.snapshots.remove('step', {});
  await timed(
    'pull step again (base is here)',
    () => packs.pull({ reference: `${repo}:step` }),
    (r) => `${mib(r.bytes_downloaded)} down, reused ${r.reused.join(',')}`,
  );
  await env.snapshots.remove('base', { cascade: true });
  await rm(file);
}

async function main(): Promise<void> {
  const env = await startBenchServices(IMAGES);
  const reg = await startRegistry();
  const dir = await mkdtemp(join(tmpdir(), 'forkd-bench-packs-'));
  try {
    console.log(`packs: a branch writing ${MIB} MiB over a warmed snapshot; registry on loopback`);
    for (const image of IMAGES) await bench(env, image, reg.host, dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
    await reg.stop();
    await env.close();
  }
}

await main();
