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
    /** What QEMU opened as the backing file (not necessarily what the header says). */
    backing_file?: string;
    image?: { 'virtual-size'?: number; 'backing-filename'?: string };
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
 * published. Fold the frozen layer under it back into it (`block-stream`, while the
 * sandbox runs): the live layer then sits directly on what the frozen one sat on, and its
 * header names that, so no chain ever names a missing file or the sandbox's own directory.
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
  const header = disk?.image?.['backing-filename'] ?? '';
  const m = new RegExp(`^${p.snapshots}/([^/]+)/${SNAPSHOT_FILES.disk}$`).exec(header);
  if (!node || !m || published(m[1] as string) || node === 'disk0') return false;
  const n = Number(/(\d+)$/.exec(node)?.[1]);
  const nodes = await vm.qmp.execute<NodeInfo[]>('query-named-block-nodes', { flat: true });
  const frozen = nodes.find((x) => x['node-name'] === `disk${n - 1}`);
  const base =
    n >= 2
      ? `disk${n - 2}`
      : nodes.find((x) => x.drv !== 'file' && x.file === frozen?.backing_file)?.['node-name'];
  const below = frozen?.image?.['backing-filename'];
  if (!frozen || !base || !below) {
    throw new ForkdError('internal', `cannot find the layers under ${node} to repair its chain`);
  }
  await streamInto(vm, node, base, below);
  return true;
}

interface NodeInfo {
  'node-name': string;
  drv: string;
  file: string;
  backing_file?: string;
  image?: { 'backing-filename'?: string };
}

const STREAM_POLL_MS = 50;

/** Copy into `node` what the layers between it and `base` hold, then drop those layers. */
async function streamInto(vm: Vm, node: string, base: string, header: string): Promise<void> {
  const job = `fold-${node}`;
  await vm.qmp.execute('block-stream', {
    'job-id': job,
    device: node,
    'base-node': base,
    'backing-file': header,
    'auto-dismiss': false,
  });
  for (;;) {
    const jobs =
      await vm.qmp.execute<{ id: string; status: string; error?: string }[]>('query-jobs');
    const j = jobs.find((x) => x.id === job);
    if (!j || j.status === 'concluded') {
      if (j) await vm.qmp.execute('job-dismiss', { id: job });
      if (j?.error) throw new ForkdError('internal', `folding the disk layer failed: ${j.error}`);
      return;
    }
    await new Promise((r) => setTimeout(r, STREAM_POLL_MS));
  }
}

/** The guest kernel version a snapshot records. */
export async function kernelVersion(p: Paths): Promise<string> {
  return (await locateGuest(p)).kernelVersion;
}
