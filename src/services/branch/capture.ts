/**
 * A branch's capture: a running sandbox into a staging dir while it keeps running. Memory,
 * devices and disk come from one instant: the source is stopped, its disk's top layer is
 * frozen (it goes on writing to a fresh layer), the pages it wrote are copied, its device
 * state saved, and it is resumed. The frozen layer becomes the snapshot's disk (a qcow2
 * layer over the snapshot it was built on: a chain); the memory file is standalone.
 * Also the repair of a source whose branch failed after its disk was switched.
 */
import { link, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import {
  captureVm,
  type CaptureMode,
  type CaptureResult,
  type RamRegion,
} from '../../drivers/qemu/capture.js';
import {
  createLayerOver,
  foldBack,
  nextLayer,
  topBackingName,
  topLayer,
} from '../../drivers/qemu/disk.js';
import type { Vm } from '../../drivers/qemu/vm.js';
import { snapshotDir, SNAPSHOT_FILES, stagingDir } from '../snapshots/files.js';

export interface BranchCapture {
  staging: string;
  capture: CaptureResult;
}

/**
 * Capture `vm` into a staging dir for `tag` and resume it. On failure the staging dir is
 * removed and the source runs on (the capture resumes it whatever happens). In live mode
 * the memory file is complete only once `capture.pages` settles.
 */
export async function captureBranch(
  p: Paths,
  vm: Vm,
  tag: string,
  opts: {
    mode: CaptureMode;
    whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void>;
    /** Told when a failed branch's disk chain could not be repaired. */
    warn: (err: unknown) => void;
  },
): Promise<BranchCapture> {
  const staging = await stagingDir(p, tag);
  try {
    const top = await topLayer(vm);
    const next = nextLayer(vm, top);
    await createLayerOver(next.file, join(snapshotDir(p, tag), SNAPSHOT_FILES.disk), top.size);
    const capture = await captureVm(
      vm,
      {
        memory: join(staging, SNAPSHOT_FILES.memory),
        deviceState: join(staging, SNAPSHOT_FILES.vmstate),
      },
      { resume: true, mode: opts.mode, disk: { top, next }, whileStopped: opts.whileStopped },
    );
    // One inode, two names: the sandbox keeps the frozen layer open as its backing file,
    // the snapshot owns it as its disk and outlives the sandbox's directory.
    await link(top.file, join(staging, SNAPSHOT_FILES.disk));
    return { staging, capture };
  } catch (e) {
    await abandonBranch(p, vm, tag, staging, opts.warn);
    throw e;
  }
}

/**
 * Undo a branch that failed: its staging dir goes, and if the source's disk was already
 * switched to a new layer, its chain is repaired ({@link repairBacking}).
 */
export async function abandonBranch(
  p: Paths,
  vm: Vm,
  tag: string,
  staging: string,
  warn: (err: unknown) => void,
): Promise<void> {
  await rm(staging, { recursive: true, force: true });
  await repairBacking(p, vm, (t) => t !== tag).catch(warn);
}

/**
 * A branch that failed after the source's disk was switched (or a daemon killed there)
 * leaves the source writing to a layer whose header names the snapshot's disk, never
 * published. Fold the frozen layer under it back into it, so no chain ever names a
 * missing file or the sandbox's own directory. Returns whether it had to.
 */
export async function repairBacking(
  p: Paths,
  vm: Vm,
  published: (tag: string) => boolean,
): Promise<boolean> {
  const header = await topBackingName(vm);
  const m = new RegExp(`^${p.snapshots}/([^/]+)/${SNAPSHOT_FILES.disk}$`).exec(header);
  if (!m || published(m[1] as string)) return false;
  return foldBack(vm);
}
