/**
 * forkd-capture, the native capture helper (native/): the command lines it takes and the
 * JSON it answers, for capture.ts and live.ts. Sparse copies of RAM base files, the copy of
 * a QEMU's private guest pages (pagemap + process_vm_readv), page compares, and memory
 * diffs (a capture made a diff over its parent's memory; a diff materialized).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { repoRoot } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import type { CapturedPages, RamRegion } from '../vmm.js';

export const CAPTURE_BINARY =
  process.env.FORKD_CAPTURE_BIN ?? join(repoRoot(), 'native', 'build', 'forkd-capture');

export type { RamRegion } from '../vmm.js';

/** Find the mapping of the RAM base file in /proc/PID/maps (the one of the guest's size). */
export async function ramRegion(
  pid: number,
  basePath: string,
  sizeBytes: number,
): Promise<RamRegion> {
  const maps = await readFile(`/proc/${pid}/maps`, 'utf8');
  for (const line of maps.split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \d+\s+(.*)$/.exec(line);
    if (!m || m[4] !== basePath) continue;
    const start = BigInt(`0x${m[1]}`);
    const end = BigInt(`0x${m[2]}`);
    if (end - start !== BigInt(sizeBytes)) continue;
    return { pid, start, end, fileOffset: BigInt(`0x${m[3]}`) };
  }
  throw new ForkdError('internal', `guest RAM mapping of ${basePath} not found in QEMU ${pid}`);
}

/**
 * Bytes of the RAM mapping the VM has written (its private pages, the `Anonymous` of the
 * mapping in /proc/PID/smaps): what a frozen fork of it shares copy-on-write.
 */
export async function writtenBytes(r: RamRegion): Promise<number> {
  const smaps = await readFile(`/proc/${r.pid}/smaps`, 'utf8');
  const head = `${r.start.toString(16)}-${r.end.toString(16)} `;
  const at = smaps.indexOf(`\n${head}`);
  const from = at >= 0 ? at + 1 : smaps.startsWith(head) ? 0 : -1;
  if (from < 0) throw new ForkdError('internal', `guest RAM mapping not found in QEMU ${r.pid}`);
  const block = smaps.slice(from).split('\n').slice(1);
  const end = block.findIndex((l) => /^[0-9a-f]+-[0-9a-f]+ /.test(l));
  const m = /^Anonymous:\s+(\d+) kB$/m.exec(block.slice(0, end < 0 ? undefined : end).join('\n'));
  return m ? Number(m[1]) * 1024 : 0;
}

async function captureTool(args: string[]): Promise<Record<string, number>> {
  const { stdout } = await run(CAPTURE_BINARY, args);
  return JSON.parse(stdout) as Record<string, number>;
}

/** Sparse copy of a base file (or an empty file of `size` for /dev/zero). */
export function sparseCopy(
  src: string,
  dst: string,
  size: number,
): Promise<Record<string, number>> {
  return captureTool(['sparse-copy', src, dst, String(size)]);
}

/** Count pages of the mapping that differ from `file` (verification; reads all of RAM). */
export function compareRegion(r: RamRegion, file: string): Promise<Record<string, number>> {
  return captureTool(['compare', ...regionArgs(r), file]);
}

/** `PID VSTART VEND` of forkd-capture's commands. */
export function mappingArgs(r: RamRegion): string[] {
  return [String(r.pid), `0x${r.start.toString(16)}`, `0x${r.end.toString(16)}`];
}

/** `PID VSTART VEND FILEOFF`. */
export function regionArgs(r: RamRegion): string[] {
  return [...mappingArgs(r), String(r.fileOffset)];
}

/** Copy the pages the VM has written (its private pages) into the memory file at their offsets. */
export async function copyPages(region: RamRegion, memory: string): Promise<CopiedPages> {
  const got = await captureTool(['pages', ...regionArgs(region), memory]);
  return { pages: got.pages ?? 0, bytes: got.bytes ?? 0, ms: got.ms ?? 0 };
}

/** What a page copy wrote (`ms`: how long the copy took). */
export type CopiedPages = CapturedPages;

/**
 * Make `pages` (a VM's written pages in an otherwise empty file) a diff over a parent memory
 * read through `layers` (topmost diff first, a full file last): equal pages are punched out.
 */
export function diffOver(pages: string, layers: string[]): Promise<Record<string, number>> {
  return captureTool(['diff', pages, ...layers]);
}

/** Write a diff's pages (its data extents) over `dst` at their offsets. */
export function overlayInto(diff: string, dst: string): Promise<Record<string, number>> {
  return captureTool(['overlay', diff, dst]);
}

/** A file's size and data extents (`[offset, length]`, SEEK_DATA/SEEK_HOLE): the rest is holes. */
export async function fileExtents(
  file: string,
): Promise<{ size: number; extents: [number, number][] }> {
  const { stdout } = await run(CAPTURE_BINARY, ['extents', file]);
  return JSON.parse(stdout) as { size: number; extents: [number, number][] };
}
