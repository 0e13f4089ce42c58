/**
 * Capture (DESIGN.md "Memory"): the one operation behind `snapshot create` and `branch`.
 * While the VM runs, sparse-copy its RAM base into the new memory file (or start it empty,
 * for a memory stored as a diff over the parent's); stop; freeze the
 * disk's top layer; copy the pages the VM wrote (its private pages) over the copy; save
 * the device state without RAM; then resume or leave it stopped for the caller to end.
 * In `live` mode the pages are not copied in the pause: QEMU is made to fork (live.ts), and
 * they are copied from that frozen copy-on-write view after the VM resumed.
 */
import { closeLayer, openLayer, switchLayer, type Layer } from './disk.js';
import {
  copyPages,
  ramRegion,
  sparseCopy,
  writtenBytes,
  type CopiedPages,
  type RamRegion,
} from './helper.js';
import { cleanupLive, LiveCopier } from './live.js';
import type { Vm } from './vm.js';
import type { CaptureFiles, CaptureMode, CaptureResult } from '../vmm.js';

export type { CaptureFiles, CaptureMode, CaptureResult, RamRegion } from '../vmm.js';

/**
 * Freeze the disk's top layer at the capture instant: the VM goes on writing to `next`
 * (an existing qcow2 file whose header already names its backing file: disk.ts). A VM
 * that is ended after its capture needs none: `stop` already flushed its disk.
 */
export interface DiskFreeze {
  top: Layer;
  next: Layer;
}

/** The pages the VM had written, as copied into the memory file. */
export type CapturedPages = CopiedPages;

/**
 * What a live capture of `vm` may add to its memory while it copies: each page the guest
 * had written is shared with the frozen fork, and copied if the guest writes it again.
 */
export async function liveCaptureBytes(vm: Vm): Promise<number> {
  return writtenBytes(await ramRegion(vm.pid, vm.spec.memPath, vm.spec.memoryMiB * 1024 * 1024));
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
    /**
     * What the new memory file starts as (default: a sparse copy of the VM's RAM base).
     * `empty`: only the written pages end up in it, for a memory stored as a diff.
     */
    start?: 'base' | 'empty';
    whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void>;
    /**
     * Live mode, just before resume: told how many bytes the frozen fork shares with the VM
     * (each may be copied once the VM writes it again). A throw fails the capture.
     */
    beforeResume?: (sharedBytes: number) => Promise<void>;
  },
): Promise<CaptureResult> {
  const mode = opts.mode ?? 'copy';
  const size = vm.spec.memoryMiB * 1024 * 1024;
  const region = await ramRegion(vm.pid, vm.spec.memPath, size);
  const { t, lap, reset } = laps();
  await sparseCopy(opts.start === 'empty' ? '/dev/zero' : vm.spec.memPath, files.memory, size);
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
    await copyPages(region, files.memory);
    lap('precopy_ms');
  }
  let resumed = false;
  let frozen = false;
  try {
    if (opts.disk) {
      await openLayer(vm, opts.disk.next);
      lap('disk_add_ms');
    }
    const stoppedAt = performance.now();
    await vm.pause();
    lap('stop_ms');
    // Live: QEMU forks on another of its threads while its main thread switches the disk
    // and saves the device state (guest RAM no longer changes once `stop` returned).
    const forking = copier?.fork();
    forking?.catch(() => undefined); // awaited below; never an unhandled rejection
    const copied = copier ? undefined : await copyPages(region, files.memory);
    if (copied) lap('pages_ms');
    if (opts.disk) {
      await switchLayer(vm, opts.disk.top, opts.disk.next);
      frozen = true;
      lap('disk_ms');
    }
    await vm.saveDeviceState(files.deviceState);
    lap('device_state_ms');
    if (forking) {
      const fork = await forking;
      t.fork_ms = fork.fork_ms;
      lap('fork_wait_ms');
      if (opts.beforeResume) {
        await opts.beforeResume(await writtenBytes({ ...region, pid: fork.child }));
        lap('shared_ms');
      }
    }
    let hookMs = 0;
    if (opts.whileStopped) {
      const h0 = performance.now();
      await opts.whileStopped(region, files.memory);
      hookMs = performance.now() - h0;
      reset();
    }
    if (opts.resume) {
      await vm.resume();
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
      await closeLayer(vm, opts.disk.next).catch(() => undefined);
    }
    throw e;
  } finally {
    if (opts.resume && !resumed) await vm.resume().catch(() => undefined);
  }
}
