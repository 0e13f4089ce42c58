/**
 * Capture (DESIGN.md "Memory"): the one operation behind `snapshot create` and `branch`.
 * While the VM runs, sparse-copy its RAM base into the new memory file; stop; freeze the
 * disk's top layer; copy the pages the VM wrote (its private pages) over the copy; save
 * the device state without RAM; then resume or leave it stopped for the caller to end.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { repoRoot } from '../../services/guest.js';
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

export interface CaptureResult {
  /** stop → cont (resume) or stop → device state saved (no resume), in ms. */
  pauseMs: number;
  /** Pages the VM had written (copied during the pause). */
  privatePages: number;
  privateBytes: number;
  timings: Record<string, number>;
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
  return captureTool([
    'compare',
    String(r.pid),
    `0x${r.start.toString(16)}`,
    `0x${r.end.toString(16)}`,
    String(r.fileOffset),
    file,
  ]);
}

function regionArgs(r: RamRegion): string[] {
  return [
    String(r.pid),
    `0x${r.start.toString(16)}`,
    `0x${r.end.toString(16)}`,
    String(r.fileOffset),
  ];
}

/**
 * Capture a running VM into `files`. `resume` continues it afterwards (branch); without it
 * the VM stays stopped (snapshot create: the caller quits it). `whileStopped` runs after
 * the copy and before resume (tests verify the copy against the stopped RAM there).
 */
export async function captureVm(
  vm: Vm,
  files: CaptureFiles,
  opts: {
    disk?: DiskFreeze;
    resume: boolean;
    whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void>;
  },
): Promise<CaptureResult> {
  const size = vm.spec.memoryMiB * 1024 * 1024;
  const region = await ramRegion(vm.pid, vm.spec.memPath, size);
  const t: Record<string, number> = {};
  let mark = performance.now();
  const lap = (name: string) => {
    const now = performance.now();
    t[name] = Math.round((now - mark) * 100) / 100;
    mark = now;
  };
  await sparseCopy(vm.spec.memPath, files.memory, size);
  lap('base_copy_ms');
  // Copy the written pages once while the VM still runs: the copy made in the pause then
  // lands on page-cache pages that already exist, which is several times faster than
  // first-touching new ones (no dirty tracking here, so the pause copies them all again).
  await captureTool(['pages', ...regionArgs(region), files.memory]);
  lap('precopy_ms');
  await vm.qmp.execute('stop');
  let resumed = false;
  try {
    lap('stop_ms');
    if (opts.disk) {
      // The overlay file was made beforehand with the backing path it must keep; adding it
      // with no backing and then `blockdev-snapshot` leaves its header as written (the
      // -sync variant would write QEMU's own, ever longer, name for the frozen node).
      await vm.qmp.execute('blockdev-add', {
        driver: 'qcow2',
        'node-name': opts.disk.nextNode,
        file: { driver: 'file', filename: opts.disk.nextOverlay },
        backing: null,
      });
      await vm.qmp.execute('blockdev-snapshot', {
        node: opts.disk.topNode,
        overlay: opts.disk.nextNode,
      });
      lap('disk_ms');
    }
    const pages = await captureTool(['pages', ...regionArgs(region), files.memory]);
    lap('pages_ms');
    await vm.qmp.execute('xen-save-devices-state', { filename: files.deviceState, live: false });
    lap('device_state_ms');
    if (opts.whileStopped) {
      await opts.whileStopped(region, files.memory);
      mark = performance.now();
    }
    if (opts.resume) {
      await vm.qmp.execute('cont');
      resumed = true;
      lap('cont_ms');
    }
    // The pause is every lap after the copies made while running; the hook is excluded.
    const pauseMs =
      Object.values(t).reduce((a, b) => a + b, 0) - (t.base_copy_ms ?? 0) - (t.precopy_ms ?? 0);
    return {
      pauseMs: Math.round(pauseMs * 100) / 100,
      privatePages: pages.pages ?? 0,
      privateBytes: pages.bytes ?? 0,
      timings: t,
    };
  } finally {
    if (opts.resume && !resumed) await vm.qmp.execute('cont').catch(() => undefined);
  }
}
