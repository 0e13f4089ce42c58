/**
 * Looking at a QEMU process from the host, for capture tests: its guest RAM read while it
 * is stopped (the reference a capture must equal page for page), its memory use, and the
 * processes a live branch must not leave behind (zombie or traced forks, copiers); and a
 * snapshot's memory as a fork maps it (a diff materialized).
 */
import { existsSync } from 'node:fs';
import { open, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../src/config.js';
import type { RamRegion } from '../../src/drivers/qemu/capture.js';
import { fileExtents } from '../../src/drivers/qemu/helper.js';
import { readManifest } from '../../src/services/snapshots/files.js';
import { materialize } from '../../src/services/snapshots/memory.js';

const CHUNK = 2 << 20;
const PAGE = 4096;

/** A copy of the stopped guest RAM, laid out as a memory file is (at the file offsets). */
export interface RamReference {
  file: string;
  fileOffset: number;
  length: number;
}

/** Read the whole RAM mapping through /proc/PID/mem into `file`. */
export async function dumpRam(region: RamRegion, file: string): Promise<RamReference> {
  const mem = await open(`/proc/${region.pid}/mem`, 'r');
  const out = await open(file, 'w');
  const length = Number(region.end - region.start);
  const fileOffset = Number(region.fileOffset);
  const buf = Buffer.alloc(CHUNK);
  try {
    for (let off = 0; off < length; off += CHUNK) {
      // Addresses fit a double exactly (47 bits); a bigint position fails on /proc/PID/mem.
      const { bytesRead } = await mem.read(buf, 0, CHUNK, Number(region.start) + off);
      await out.write(buf, 0, bytesRead, fileOffset + off);
    }
  } finally {
    await mem.close();
    await out.close();
  }
  return { file, fileOffset, length };
}

/**
 * RAM offsets (guest-physical addresses) of the 4 KiB pages of `file` that differ from the
 * reference (holes read as zeros).
 */
async function pagesDiffering(ref: RamReference, file: string): Promise<number[]> {
  const [a, b] = await Promise.all([open(ref.file, 'r'), open(file, 'r')]);
  const ba = Buffer.alloc(CHUNK);
  const bb = Buffer.alloc(CHUNK);
  const at: number[] = [];
  try {
    for (let off = 0; off < ref.length; off += CHUNK) {
      ba.fill(0);
      bb.fill(0);
      await a.read(ba, 0, CHUNK, ref.fileOffset + off);
      await b.read(bb, 0, CHUNK, ref.fileOffset + off);
      for (let p = 0; p < CHUNK; p += PAGE) {
        if (ba.compare(bb, p, p + PAGE, p, p + PAGE) !== 0) at.push(ref.fileOffset + off + p);
      }
    }
  } finally {
    await a.close();
    await b.close();
  }
  return at;
}

/** How many 4 KiB pages of `file` differ from the reference. */
export async function differingPages(ref: RamReference, file: string): Promise<number> {
  return (await pagesDiffering(ref, file)).length;
}

/**
 * The differing pages of `file` as a failure message says them: how many, and the first
 * few RAM offsets (guest-physical addresses), each with whether `diff` (the snapshot's
 * stored diff) holds data there or the page came from its parent's memory.
 */
export async function differingReport(
  ref: RamReference,
  file: string,
  diff?: string,
): Promise<string> {
  const at = await pagesDiffering(ref, file);
  if (at.length === 0) return 'none';
  const extents = diff && existsSync(diff) ? (await fileExtents(diff)).extents : [];
  const inDiff = (o: number) => extents.some(([d, n]) => o >= d && o < d + n);
  const where = (o: number) => (extents.length ? (inDiff(o) ? ' (diff)' : ' (parent)') : '');
  const shown = at.slice(0, 8).map((o) => `0x${o.toString(16)}${where(o)}`);
  return `${at.length}: ${shown.join(', ')}${at.length > 8 ? ', …' : ''}`;
}
export async function removeReference(ref: RamReference): Promise<void> {
  await rm(ref.file, { force: true });
}

interface ProcStat {
  pid: number;
  comm: string;
  state: string;
  ppid: number;
}

async function procs(): Promise<ProcStat[]> {
  const out: ProcStat[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(join('/proc', name, 'stat'), 'utf8').catch(() => '');
    const m = /^(\d+) \((.*)\) (\S) (\d+)/s.exec(stat);
    if (m)
      out.push({
        pid: Number(m[1]),
        comm: m[2] as string,
        state: m[3] as string,
        ppid: Number(m[4]),
      });
  }
  return out;
}

/** Every child process of `pid` (a QEMU must have none: frozen forks are gone). */
export async function childrenOf(pid: number): Promise<ProcStat[]> {
  return (await procs()).filter((p) => p.ppid === pid);
}

/** `forkd-capture` processes this test process started that still run. */
export async function runningCopiers(): Promise<ProcStat[]> {
  return (await procs()).filter((p) => p.ppid === process.pid && p.comm === 'forkd-capture');
}

/** The `Field:  N kB` lines of /proc/PID/FILE, read once, by field, in KiB. */
async function procKiB(pid: number, file: string): Promise<(field: string) => number> {
  const text = await readFile(`/proc/${pid}/${file}`, 'utf8');
  return (field) => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
    if (!m) throw new Error(`no ${field} in /proc/${pid}/${file}`);
    return Number(m[1]);
  };
}

/** A field of /proc/PID/status in KiB (RssAnon, VmRSS…). */
export async function statusKiB(pid: number, field: string): Promise<number> {
  return (await procKiB(pid, 'status'))(field);
}

/** Whether the guest RAM mapping is still MADV_DONTFORK (`dc`), as QEMU made it. */
export async function ramIsDontFork(region: RamRegion): Promise<boolean> {
  const smaps = await readFile(`/proc/${region.pid}/smaps`, 'utf8');
  const start = region.start.toString(16);
  const at = smaps.search(new RegExp(`^0*${start}-`, 'm'));
  if (at < 0) throw new Error('guest RAM mapping not found in smaps');
  const flags = /^VmFlags:(.*)$/m.exec(smaps.slice(at))?.[1] ?? '';
  return flags.split(' ').includes('dc');
}

/**
 * How much of `pid`'s anonymous memory is still shared with another process (Anonymous −
 * Pss_Anon, KiB): a QEMU shares none, except with a live branch's frozen fork.
 */
export async function sharedAnonKiB(pid: number): Promise<number> {
  const kib = await procKiB(pid, 'smaps_rollup');
  return kib('Anonymous') - kib('Pss_Anon');
}

/** The full memory file of a snapshot as a fork maps it (a diff's is materialized first). */
export async function memoryOf(p: Paths, tag: string): Promise<string> {
  return (await materialize(p, await readManifest(p, tag))).path;
}
