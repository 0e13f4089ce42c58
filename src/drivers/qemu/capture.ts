/**
 * Capture (DESIGN.md "Memory"): the one operation behind `snapshot create` and `branch`.
 * While the VM runs, sparse-copy its RAM base into the new memory file; stop; freeze the
 * disk's top layer; copy the pages the VM wrote (its private pages) over the copy; save
 * the device state without RAM; then resume or leave it stopped for the caller to end.
 * In `live` mode the pages are not copied in the pause: QEMU is made to fork (live.ts), and
 * they are copied from that frozen copy-on-write view after the VM resumed.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { repoRoot } from '../../services/guest.js';
import { cleanupLive, LiveCopier } from './live.js';
import type { Vm } from './vm.js';

export const CAPTURE_BINARY =
  process.env.FORKD_CAPTURE_BIN ?? join(repoRoot(), 'native', 'build', 'forkd-capture');

/** The guest-RAM mapping inside the QEMU process. */
export interface RamRegion {
  pid: number;
  start: bigint;
  end: bigint;
  /** Offset of `start` in the base file (the mapping's file offset). */
  fileOffset: bigint;
}

export interface CaptureFiles {
  /** New memory file to write (must not exist yet or be disposable). */
  memory: string;
  /** New device-state file (QEMU writes it). */
  deviceState: string;
}

/**
 * Freeze the disk's top layer at the capture instant: the VM goes on writing to a new
 * overlay (an existing qcow2 file whose header already names its backing file). A VM that
 * is ended after its capture needs none: `stop` already flushed its disk.
 */
export interface DiskFreeze {
  topNode: string;
  nextNode: string;
  nextOverlay: string;
}

/**
 * How the written pages are taken: `copy` copies them while the VM is stopped (the pause
 * grows with what it wrote); `live` freezes them copy-on-write and copies after resume.
 */
export type CaptureMode = 'copy' | 'live';

/** The pages the VM had written, as copied into the memory file. */
export interface CapturedPages {
  pages: number;
  bytes: number;
  /** How long copying them took (in the pause for `copy`, after it for `live`). */
  ms: number;
}

export interface CaptureResult {
  mode: CaptureMode;
  /** stop → cont (resume) or stop → device state saved (no resume), in ms. */
  pauseMs: number;
  timings: Record<string, number>;
  /**
   * Settles once every written page is in the memory file: already in `copy` mode, after
   * the copy from the frozen view in `live` mode (which rejects if that copy fails).
   */
  pages: Promise<CapturedPages>;
}

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

/** Lap timer: each lap's ms under its name. */
function laps(): { t: Record<string, number>; lap: (name: string) => void; reset: () => void } {
  const t: Record<string, number> = {};
  let mark = performance.now();
  return {
    t,
    lap: (name) => {
      const now = performance.now();
      t[name] = Math.round((now - mark) * 100) / 100;
      mark = now;
    },
    reset: () => (mark = performance.now()),
  };
}

/**
 * Open the layer the VM will write to after the freeze, while it still runs (so the pause
 * holds only the switch). The overlay file was made beforehand with the backing path it
 * must keep; adding it with no backing and then `blockdev-snapshot` leaves its header as
 * written (the -sync variant would write QEMU's own, ever longer, name for the frozen node).
 */
async function addNextLayer(vm: Vm, disk: DiskFreeze): Promise<void> {
  await vm.qmp.execute('blockdev-add', {
    driver: 'qcow2',
    'node-name': disk.nextNode,
    file: { driver: 'file', filename: disk.nextOverlay },
    backing: null,
  });
}

/** The copy's end in live mode; a failed copy leaves nothing behind in QEMU either. */
async function liveCopied(copier: LiveCopier): Promise<CapturedPages> {
  try {
    const done = await copier.done();
    return { pages: done.pages, bytes: done.bytes, ms: done.copy_ms };
  } catch (e) {
    await cleanupLive(copier.region).catch(() => undefined);
    throw e;
  }
}

/** Copy the pages the VM has written into the memory file (mode copy). */
async function copyPagesNow(region: RamRegion, memory: string): Promise<CapturedPages> {
  const got = await captureTool(['pages', ...regionArgs(region), memory]);
  return { pages: got.pages ?? 0, bytes: got.bytes ?? 0, ms: got.ms ?? 0 };
}

/**
 * Capture a running VM into `files`. `resume` continues it afterwards (branch); without it
 * the VM stays stopped (snapshot create: the caller quits it). `whileStopped` runs just
 * before resume (tests read the stopped RAM there to check the capture against it).
 */
export async function captureVm(
  vm: Vm,
  files: CaptureFiles,
  opts: {
    disk?: DiskFreeze;
    resume: boolean;
    mode?: CaptureMode;
    whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void>;
  },
): Promise<CaptureResult> {
  const mode = opts.mode ?? 'copy';
  const size = vm.spec.memoryMiB * 1024 * 1024;
  const region = await ramRegion(vm.pid, vm.spec.memPath, size);
  const { t, lap, reset } = laps();
  await sparseCopy(vm.spec.memPath, files.memory, size);
  lap('base_copy_ms');
  let copier: LiveCopier | undefined;
  if (mode === 'live') {
    copier = await LiveCopier.start(region, files.memory).catch(async (e: unknown) => {
      await cleanupLive(region).catch(() => undefined); // a half-done preparation
      throw e;
    });
    lap('prepare_ms');
  } else {
    // Copy the written pages once while the VM still runs: the copy made in the pause then
    // lands on page-cache pages that already exist, which is several times faster than
    // first-touching new ones (no dirty tracking here, so the pause copies them all again).
    await copyPagesNow(region, files.memory);
    lap('precopy_ms');
  }
  let resumed = false;
  let frozen = false;
  try {
    if (opts.disk) {
      await addNextLayer(vm, opts.disk);
      lap('disk_add_ms');
    }
    const stoppedAt = performance.now();
    await vm.qmp.execute('stop');
    lap('stop_ms');
    // Live: QEMU forks on another of its threads while its main thread switches the disk
    // and saves the device state (guest RAM no longer changes once `stop` returned).
    const forking = copier?.fork();
    forking?.catch(() => undefined); // awaited below; never an unhandled rejection
    const copied = copier ? undefined : await copyPagesNow(region, files.memory);
    if (copied) lap('pages_ms');
    if (opts.disk) {
      await vm.qmp.execute('blockdev-snapshot', {
        node: opts.disk.topNode,
        overlay: opts.disk.nextNode,
      });
      frozen = true;
      lap('disk_ms');
    }
    await vm.qmp.execute('xen-save-devices-state', { filename: files.deviceState, live: false });
    lap('device_state_ms');
    if (forking) {
      t.fork_ms = (await forking).fork_ms;
      lap('fork_wait_ms');
    }
    let hookMs = 0;
    if (opts.whileStopped) {
      const h0 = performance.now();
      await opts.whileStopped(region, files.memory);
      hookMs = performance.now() - h0;
      reset();
    }
    if (opts.resume) {
      await vm.qmp.execute('cont');
      resumed = true;
      lap('cont_ms');
    }
    const pauseMs = Math.round((performance.now() - stoppedAt - hookMs) * 100) / 100;
    const pages = copier ? liveCopied(copier) : Promise.resolve(copied as CapturedPages);
    pages.catch(() => undefined); // observed by the caller; never an unhandled rejection
    return { mode, pauseMs, timings: t, pages };
  } catch (e) {
    if (copier) {
      await copier.abort().catch(() => undefined);
      await cleanupLive(region).catch(() => undefined);
    }
    // A layer opened but never switched to would make the next branch fail on its name.
    if (opts.disk && !frozen) {
      await vm.qmp
        .execute('blockdev-del', { 'node-name': opts.disk.nextNode })
        .catch(() => undefined);
    }
    throw e;
  } finally {
    if (opts.resume && !resumed) await vm.qmp.execute('cont').catch(() => undefined);
  }
}
