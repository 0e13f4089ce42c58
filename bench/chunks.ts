/**
 * Chunked snapshots benchmark (issue 31), on a warm Python parent (forkd-test-python, numpy
 * imported and a 1M-element array made, 512 MiB guest) and a branch of it (a fork that wrote
 * MIB MiB of random data to disk): two nodes as two service sets in this process (A pushes, B
 * pulls), Debian's `docker-registry` on loopback.
 *  - formats: push and pull of the parent and of the branch, whole files (`--format files`)
 *    vs chunks: bytes moved and seconds;
 *  - fork by reference on B: cold (nothing here), chunks cached (snapshot gone), warm (installed);
 *  - chunk sizes 1, 2, 4 MiB: bytes and seconds of the branch's push and pull;
 *  - touch: what a fork reads of its memory file in its first second and its first exec (the
 *    pages present in its QEMU's mapping of the file, /proc/PID/pagemap, after the file was
 *    dropped from the page cache): the case for a lazy pull.
 * Usage: node dist/bench/chunks.js [--mib 10] [--memory 512] [--image forkd-test-python]
 *        [--only formats,refs,sizes,touch]
 */
import { open, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PackManager } from '../src/services/packs/service.js';
import { extentsOf } from '../src/services/packs/chunks.js';
import { run } from '../src/util/exec.js';
import { startRegistry } from '../test/e2e/images/registry.js';
import { caller, startBenchServices, type BenchServices } from './services.js';

const args = process.argv.slice(2);
const opt = (name: string, dflt: string) =>
  args.includes(name) ? (args[args.indexOf(name) + 1] as string) : dflt;
const MIB = Number(opt('--mib', '10'));
const MEMORY = Number(opt('--memory', '512'));
const IMAGE = opt('--image', 'forkd-test-python');
const ONLY = opt('--only', 'formats,refs,sizes,touch').split(',');
const M = 1048576;
const mib = (n: number) => `${(n / M).toFixed(1)} MiB`;
const packsOf = (s: BenchServices) => s.services.packs as PackManager;

async function timed<T>(f: () => Promise<T>): Promise<{ r: T; s: number }> {
  const t0 = performance.now();
  const r = await f();
  return { r, s: (performance.now() - t0) / 1000 };
}

const row = (label: string, s: number, what: string) =>
  console.log(`  ${label.padEnd(40)} ${s.toFixed(1).padStart(6)} s  ${what}`);

/** B forgets every snapshot (its chunk cache too unless `keepCache`). */
async function emptyNode(b: BenchServices, keepCache = false): Promise<void> {
  for (const t of (await b.snapshots.list()).map((x) => x.tag).reverse())
    await b.snapshots.remove(t, { cascade: true }).catch(() => undefined);
  await packsOf(b).cache.saveRefs({});
  if (!keepCache) await packsOf(b).references.trim(0);
}

const fetched = (b: BenchServices) => packsOf(b).cache.stats.bytes_fetched;

/** Push base then step to `repo` as `format`, and pull each onto an empty B. */
async function formats(
  a: BenchServices,
  b: BenchServices,
  repo: string,
  format: 'files' | 'chunks',
) {
  for (const tag of ['base', 'step']) {
    const { r, s } = await timed(() =>
      packsOf(a).push(tag, `${repo}:${tag}`, undefined, undefined, { format }),
    );
    row(
      `push ${tag} (${format})`,
      s,
      `${mib(r.bytes_uploaded)} up, ${r.uploaded} blobs up, ${r.skipped} skipped`,
    );
  }
  await emptyNode(b);
  for (const tag of ['base', 'step']) {
    const f0 = fetched(b);
    const { r, s } = await timed(() => packsOf(b).pull({ reference: `${repo}:${tag}` }));
    const down = format === 'chunks' ? fetched(b) - f0 : r.bytes_downloaded;
    row(`pull ${tag} (${format}${tag === 'step' ? ', base here' : ''})`, s, `${mib(down)} down`);
  }
  await emptyNode(b);
}

/** Fork by reference on B: cold, chunks cached but snapshot gone, and installed. */
async function refs(a: BenchServices, b: BenchServices, ref: string) {
  await packsOf(a).push('step', ref);
  await emptyNode(b);
  for (const [label, prep] of [
    ['fork by reference, cold node', async () => undefined],
    ['fork by reference, warm node', async () => undefined],
    ['fork by reference, chunks cached', () => emptyNode(b, true)],
  ] as const) {
    await prep();
    const f0 = fetched(b);
    const { r, s } = await timed(() => b.snapshots.fork({ snapshot: ref, n: 1 }, caller));
    row(label, s, `${mib(fetched(b) - f0)} fetched`);
    for (const x of r.sandboxes) await b.sandboxes.kill(x.id);
  }
  await emptyNode(b);
}

/**
 * Bytes and seconds of the branch's push and pull under each chunk size, each size on a
 * registry of its own (another's repositories would lend their chunks by mount).
 */
async function sizes(a: BenchServices, b: BenchServices) {
  for (const size of [1, 2, 4]) {
    process.env.FORKD_CHUNK_MIB = String(size);
    const reg = await startRegistry();
    try {
      const repo = `${reg.host}/bench/size${size}`;
      const base = await timed(() => packsOf(a).push('base', `${repo}:base`));
      const step = await timed(() => packsOf(a).push('step', `${repo}:step`));
      await emptyNode(b);
      await packsOf(b).pull({ reference: `${repo}:base` });
      const f0 = fetched(b);
      const pull = await timed(() => packsOf(b).pull({ reference: `${repo}:step` }));
      const up = (r: typeof base.r) => `${mib(r.bytes_uploaded)} up, ${r.uploaded} blobs`;
      row(`${size} MiB chunks: push base`, base.s, up(base.r));
      row(`${size} MiB chunks: push step`, step.s, up(step.r));
      row(`${size} MiB chunks: pull step (base here)`, pull.s, `${mib(fetched(b) - f0)} down`);
    } finally {
      await reg.stop();
    }
  }
  delete process.env.FORKD_CHUNK_MIB;
  await emptyNode(b);
}

/** The memory file a QEMU maps (its largest mapping under the snapshots dir) and where. */
async function memoryMapping(pid: number, snapshots: string) {
  const maps = await readFile(`/proc/${pid}/maps`, 'utf8');
  let best = { start: 0, end: 0, path: '' };
  for (const line of maps.split('\n')) {
    const [range, , , , , path] = line.split(/\s+/);
    if (!path?.startsWith(snapshots)) continue;
    const [s, e] = (range ?? '0-0').split('-').map((h) => parseInt(h, 16)) as [number, number];
    if (e - s > best.end - best.start) best = { start: s, end: e, path };
  }
  if (!best.path) throw new Error(`QEMU ${pid} maps no snapshot memory`);
  return best;
}

/** Pages of the mapping present in the process (or swapped), as a bitmap, from pagemap. */
async function presentPages(pid: number, start: number, end: number): Promise<Uint8Array> {
  const pages = (end - start) / 4096;
  const buf = Buffer.alloc(pages * 8);
  const fh = await open(`/proc/${pid}/pagemap`, 'r');
  try {
    await fh.read(buf, 0, buf.length, (start / 4096) * 8);
  } finally {
    await fh.close();
  }
  const out = new Uint8Array(pages);
  for (let i = 0; i < pages; i++) {
    const hi = buf.readUInt32LE(i * 8 + 4);
    out[i] = hi & (0x80000000 | 0x40000000) ? 1 : 0;
  }
  return out;
}

/** The 4 KiB pages of a file that hold data (its extents), as a bitmap. */
async function dataPages(path: string, pages: number): Promise<Uint8Array> {
  const out = new Uint8Array(pages);
  for (const [o, l] of (await extentsOf(path)).extents)
    out.fill(1, Math.floor(o / 4096), Math.min(pages, Math.ceil((o + l) / 4096)));
  return out;
}

/** Chunks of `chunkPages` pages with a page read, and with data. */
function chunksRead(present: Uint8Array, data: Uint8Array, chunkPages: number) {
  let read = 0;
  let withData = 0;
  for (let c = 0; c * chunkPages < present.length; c++) {
    const range = [c * chunkPages, Math.min(present.length, (c + 1) * chunkPages)] as const;
    if (present.subarray(...range).some((x) => x)) read++;
    if (data.subarray(...range).some((x) => x)) withData++;
  }
  return `${read}/${withData} (${((100 * read) / withData).toFixed(0)} %)`;
}

/** Pages read of the data, and chunks read at 1, 2 and 4 MiB. */
function summarize(label: string, present: Uint8Array, data: Uint8Array) {
  let pages = 0;
  let dataN = 0;
  for (let p = 0; p < present.length; p++) {
    pages += present[p]!;
    dataN += data[p]!;
  }
  const sizes = [1, 2, 4].map((n) => `${n}M ${chunksRead(present, data, (n * M) / 4096)}`);
  console.log(
    `  ${label.padEnd(28)} ${mib(pages * 4096).padStart(10)} of ${mib(dataN * 4096)} data ` +
      `(${((100 * pages) / dataN).toFixed(1)} %); chunks read ${sizes.join(', ')}`,
  );
}

/** What a fork touches of its memory file: at start, 1 s later, after one exec (and an eval). */
async function touch(a: BenchServices) {
  const tag = 'base';
  const file = join(a.p.snapshots, tag, 'memory');
  // Out of the page cache (written back first: dirty pages stay), so a page counts only
  // once the fork reads it.
  await run('sync', [file]);
  await run('dd', [`if=${file}`, 'iflag=nocache', 'count=0', 'status=none']);
  const { stdout: cached } = await run('fincore', ['-b', '-n', '-o', 'RES', file]);
  console.log(
    `  memory file ${mib((await stat(file)).size)}; in page cache after the drop: ${mib(Number(cached.trim()))}`,
  );
  const { r, s } = await timed(() => a.snapshots.fork({ snapshot: tag, n: 1 }, caller));
  const id = r.sandboxes[0]!.id;
  console.log(`  fork answered in ${s.toFixed(2)} s`);
  const pid = (await a.sandboxes.get(id)).pid as number;
  const mapped = await memoryMapping(pid, a.p.snapshots);
  const pages = (mapped.end - mapped.start) / 4096;
  const data = await dataPages(mapped.path, pages);
  const at = async (label: string) =>
    summarize(label, await presentPages(pid, mapped.start, mapped.end), data);
  await at('answered (restore + agent)');
  await sleep(1000);
  await at('1 s later');
  const ex = await a.sandboxes.exec(id, { argv: ['sh', '-c', 'echo hi'] });
  if (ex.exit_code !== 0) throw new Error('exec failed');
  await at('after first exec');
  if (IMAGE === 'forkd-test-python') {
    const ev = await a.sandboxes.exec(id, {
      argv: ['python3', '-c', 'import numpy; print(numpy.arange(10).sum())'],
    });
    if (ev.exit_code !== 0) throw new Error('python exec failed');
    await at('after a python3 -c numpy');
  }
  const { stdout: after } = await run('fincore', ['-b', '-n', '-o', 'RES', file]);
  console.log(`  in page cache at the end (readahead included): ${mib(Number(after.trim()))}`);
  await a.sandboxes.kill(id);
}

async function main(): Promise<void> {
  const a = await startBenchServices([IMAGE]);
  const b = await startBenchServices([IMAGE]);
  const reg = await startRegistry();
  try {
    const { stdout: load } = await run('uptime', []);
    console.log(`chunks: ${IMAGE}, ${MEMORY} MiB guest, branch writes ${MIB} MiB; ${load.trim()}`);
    const py = IMAGE === 'forkd-test-python';
    const t = await timed(() =>
      a.snapshots.create(
        {
          tag: 'base',
          image: IMAGE,
          memory_mib: MEMORY,
          network: 'none',
          ...(py
            ? { contexts: ['python'], eval: ['import numpy as np', 'a = np.arange(1_000_000)'] }
            : { warm: ['echo warm > /tmp/w'] }),
        },
        caller,
      ),
    );
    console.log(`  warm parent made in ${t.s.toFixed(0)} s`);
    const kid = (await a.snapshots.fork({ snapshot: 'base', n: 1 }, caller)).sandboxes[0]!.id;
    const fill = `dd if=/dev/urandom of=/root/blob bs=1048576 count=${MIB} 2>/dev/null && sync`;
    const filled = await a.sandboxes.exec(kid, { argv: ['sh', '-c', fill] });
    if (filled.exit_code !== 0) throw new Error(`${fill}: exit ${filled.exit_code}`);
    await a.branch.branch(kid, { tag: 'step' }, caller);
    await a.sandboxes.kill(kid);

    if (ONLY.includes('touch')) {
      console.log('touch (pages present in the fork QEMU’s mapping of the memory file):');
      await touch(a);
    }
    if (ONLY.includes('formats')) {
      console.log('formats:');
      await formats(a, b, `${reg.host}/bench/files`, 'files');
      await formats(a, b, `${reg.host}/bench/chunks`, 'chunks');
    }
    if (ONLY.includes('refs')) {
      console.log('fork by reference (node B):');
      await refs(a, b, `${reg.host}/bench/refs:step`);
    }
    if (ONLY.includes('sizes')) {
      console.log('chunk sizes (the branch over its pushed parent):');
      await sizes(a, b);
    }
    console.log(`done; ${(await run('uptime', [])).stdout.trim()}`);
  } finally {
    await reg.stop();
    await b.close();
    await a.close();
  }
}

await main();
