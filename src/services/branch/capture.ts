/**
 * A branch's capture: a running sandbox into a staging dir while it keeps running. Memory,
 * devices and disk come from one instant: the source is stopped, its disk's top layer is
 * frozen (it goes on writing to a fresh layer), the pages it wrote are copied, its device
 * state saved, and it is resumed. The frozen layer becomes the snapshot's disk (a qcow2
 * layer over the snapshot it was built on: a chain); the memory file gets the written pages
 * (the branch service makes it a diff over its parent's memory).
 * The disk switch is recorded as an intent before anything is made (recover.ts undoes it
 * if the branch fails, now or after a crash).
 */
import { link, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import type { BranchIntent, BranchIntentRows } from '../../store/intents.js';
import { crashPoint } from '../../util/crash.js';
import type { Lease } from '../sandboxes/host.js';
import { snapshotDir, SNAPSHOT_FILES, stagingDir } from '../snapshots/files.js';
import { undoIntent } from './recover.js';
import type { CaptureMode, CaptureResult, DiskLayer, RamRegion } from '../../drivers/vmm.js';
import { vmm } from '../vmm.js';

export interface BranchCapture {
  staging: string;
  capture: CaptureResult;
  intent: BranchIntent;
}

export interface CaptureOptions {
  mode: CaptureMode;
  /** `empty`: the memory file gets the written pages only (made a diff before publishing). */
  start: 'base' | 'empty';
  whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void>;
  /** Live mode, in the pause once the fork is made: the bytes it shares with the source. */
  beforeResume?: (sharedBytes: number) => Promise<void>;
  intents: BranchIntentRows;
  /** Told when a failed branch's disk chain could not be repaired. */
  warn: (err: unknown) => void;
}

/**
 * Capture the leased sandbox into a staging dir for `tag` and resume it. On failure the
 * staging dir is removed, the disk switch undone, and the source runs on (the capture
 * resumes it whatever happens). In live mode the memory file is complete only once
 * `capture.pages` settles.
 */
export async function captureBranch(
  p: Paths,
  source: Lease,
  tag: string,
  opts: CaptureOptions,
): Promise<BranchCapture> {
  const { vm } = source;
  const staging = await stagingDir(p, tag);
  let intent: BranchIntent | undefined;
  try {
    const top = await vmm().disks.top(vm);
    const next = vmm().disks.next(vm, top);
    intent = recordIntent(opts.intents, source.id, tag, top, next);
    crashPoint('branch:intent');
    await vmm().disks.createLayerOver(
      next.file,
      join(snapshotDir(p, tag), SNAPSHOT_FILES.disk),
      top.size,
    );
    crashPoint('branch:layer');
    const capture = await vmm().capture(
      vm,
      {
        memory: join(staging, SNAPSHOT_FILES.memory),
        deviceState: join(staging, SNAPSHOT_FILES.vmstate),
      },
      {
        resume: true,
        mode: opts.mode,
        start: opts.start,
        disk: { top, next },
        whileStopped: opts.whileStopped,
        beforeResume: opts.beforeResume,
      },
    );
    crashPoint('branch:switched');
    // One inode, two names: the sandbox keeps the frozen layer open as its backing file,
    // the snapshot owns it as its disk and outlives the sandbox's directory.
    await link(top.file, join(staging, SNAPSHOT_FILES.disk));
    return { staging, capture, intent };
  } catch (e) {
    await abandonBranch(source, staging, intent, opts);
    throw e;
  }
}

function recordIntent(
  rows: BranchIntentRows,
  sandbox: string,
  tag: string,
  top: DiskLayer,
  next: Pick<DiskLayer, 'name' | 'file'>,
): BranchIntent {
  const intent = {
    tag,
    sandbox,
    frozen_layer: top.name,
    frozen_file: top.file,
    next_layer: next.name,
    next_file: next.file,
    size: top.size,
  };
  rows.record(intent);
  return { ...intent, created_at: new Date().toISOString() };
}

/**
 * Undo a branch that failed: its staging dir goes, and its recorded disk switch is undone
 * (the new layer discarded, or, once switched, the frozen layer folded back into it).
 */
export async function abandonBranch(
  source: Lease,
  staging: string,
  intent: BranchIntent | undefined,
  opts: Pick<CaptureOptions, 'intents' | 'warn'>,
): Promise<void> {
  await rm(staging, { recursive: true, force: true });
  if (intent) await undoIntent(source, intent, opts.intents).catch(opts.warn);
}
