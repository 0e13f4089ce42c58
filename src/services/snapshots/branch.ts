/**
 * Branch: capture a running sandbox into a new snapshot while it keeps running. Memory,
 * devices and disk come from one instant: the source is stopped, its disk's top layer is
 * frozen (it goes on writing to a fresh overlay), the pages it wrote are copied, its device
 * state saved, and it is resumed. The frozen layer becomes the snapshot's disk (a qcow2
 * layer over the snapshot it was built on: a chain); the memory file is standalone.
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
import type { Vm } from '../../drivers/qemu/vm.js';
import { ForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { locateGuest } from '../guest.js';
import { snapshotDir, SNAPSHOT_FILES, stagingDir } from './files.js';

/** The disk node the VM's virtio-blk device writes to now, and that layer's file. */
export interface TopLayer {
  node: string;
  file: string;
  /** Virtual size of the disk in bytes. */
  size: number;
}

interface BlockInfo {
  qdev?: string;
  inserted?: {
    'node-name'?: string;
    backing_file?: string;
    image?: { 'virtual-size'?: number };
  };
}

/**
 * Ask QEMU which node sits on top of the sandbox's disk (it changes with every branch). Its
 * file follows from forkd's own naming (disk0 → overlay.qcow2, diskN → overlay-N.qcow2):
 * QEMU reports a `json:` pseudo-name once a backing file string was changed.
 */
export async function topLayer(vm: Vm): Promise<TopLayer> {
  const blocks = await vm.qmp.execute<BlockInfo[]>('query-block');
  const disk = blocks.find((b) => b.qdev?.includes('vblk0'))?.inserted;
  const node = disk?.['node-name'];
  const size = disk?.image?.['virtual-size'];
  if (!node || !size) throw new ForkdError('internal', 'QEMU reports no disk on the sandbox');
  return { node, file: layerFile(vm.spec.dir, node), size };
}

function layerFile(dir: string, node: string): string {
  const n = Number(/(\d+)$/.exec(node)?.[1] ?? 0);
  return join(dir, n === 0 ? 'overlay.qcow2' : `overlay-${n}.qcow2`);
}

/** Node name and overlay file of the layer a VM writes to after its next branch. */
function nextLayer(dir: string, top: TopLayer): TopLayer {
  const node = `disk${Number(/(\d+)$/.exec(top.node)?.[1] ?? 0) + 1}`;
  return { node, file: layerFile(dir, node), size: top.size };
}

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
  opts: { mode: CaptureMode; whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void> },
): Promise<BranchCapture> {
  const staging = await stagingDir(p, tag);
  try {
    const top = await topLayer(vm);
    const next = nextLayer(vm.spec.dir, top);
    // The live overlay names the snapshot's disk as its backing from the start, so the
    // chain on disk never mentions the sandbox's own directory (-u: it is published later).
    const published = join(snapshotDir(p, tag), SNAPSHOT_FILES.disk);
    await run('qemu-img', [
      'create',
      '-q',
      '-f',
      'qcow2',
      '-u',
      '-F',
      'qcow2',
      '-b',
      published,
      next.file,
      String(next.size),
    ]);
    const capture = await captureVm(
      vm,
      {
        memory: join(staging, SNAPSHOT_FILES.memory),
        deviceState: join(staging, SNAPSHOT_FILES.vmstate),
      },
      {
        resume: true,
        mode: opts.mode,
        disk: { topNode: top.node, nextNode: next.node, nextOverlay: next.file },
        whileStopped: opts.whileStopped,
      },
    );
    // One inode, two names: the sandbox keeps the frozen layer open as its backing file,
    // the snapshot owns it as its disk and outlives the sandbox's directory.
    await link(top.file, join(staging, SNAPSHOT_FILES.disk));
    return { staging, capture };
  } catch (e) {
    await rm(staging, { recursive: true, force: true });
    throw e;
  }
}

/**
 * A daemon killed between a branch's disk freeze and its publication leaves the source's
 * live overlay naming a snapshot disk that was never published. Point it back at the
 * frozen layer in the sandbox's own directory, so later branches build a valid chain.
 * Returns whether it had to.
 */
export async function repairBacking(
  p: Paths,
  vm: Vm,
  published: (tag: string) => boolean,
): Promise<boolean> {
  const blocks = await vm.qmp.execute<BlockInfo[]>('query-block');
  const disk = blocks.find((b) => b.qdev?.includes('vblk0'))?.inserted;
  const node = disk?.['node-name'];
  const backing = disk?.backing_file ?? '';
  const m = new RegExp(`^${p.snapshots}/([^/]+)/${SNAPSHOT_FILES.disk}$`).exec(backing);
  if (!node || !m || published(m[1] as string) || node === 'disk0') return false;
  const below = `disk${Number(/(\d+)$/.exec(node)?.[1] ?? 1) - 1}`;
  await vm.qmp.execute('change-backing-file', {
    device: node,
    'image-node-name': node,
    'backing-file': layerFile(vm.spec.dir, below),
  });
  return true;
}

/** The guest kernel version a snapshot records. */
export async function kernelVersion(p: Paths): Promise<string> {
  return (await locateGuest(p)).kernelVersion;
}
