/**
 * Disk layers (DESIGN.md "Disk: qcow2 layers"): every file and every QMP command that
 * makes, names, freezes, switches, rebases or folds back a sandbox's qcow2 layers. A
 * sandbox's disk is a chain: its image (raw), frozen layers of the snapshots it came from,
 * and the overlay it writes to now. Services decide when; this module knows how.
 */
import { existsSync } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { ForkdError } from '../../errors.js';
import { crashPoint } from '../../util/crash.js';
import { run } from '../../util/exec.js';
import { ownLikeDir } from './confine.js';
import { monitor, type Vm } from './vm.js';
import type { ChainOnDisk, LayerHeader } from '../vmm.js';

/** The qemu-img binary (FORKD_QEMU_IMG overrides, as FORKD_QEMU does for QEMU). */
export const QEMU_IMG = process.env.FORKD_QEMU_IMG ?? 'qemu-img';

/** Create a qcow2 overlay over a backing file (raw image or frozen qcow2 layer). */
export async function createOverlay(
  overlay: string,
  backing: string,
  backingFormat: 'raw' | 'qcow2',
): Promise<void> {
  await run(QEMU_IMG, ['create', '-q', '-f', 'qcow2', '-F', backingFormat, '-b', backing, overlay]);
}

/**
 * Create a qcow2 layer whose header names `backing` although that file does not exist yet
 * (`-u`): the layer a sandbox writes to after a branch names the branch's disk from the
 * start, so the chain on disk never mentions the sandbox's own directory.
 */
export async function createLayerOver(
  file: string,
  backing: string,
  sizeBytes: number,
): Promise<void> {
  await run(QEMU_IMG, [
    'create',
    '-q',
    '-f',
    'qcow2',
    '-u',
    '-F',
    'qcow2',
    '-b',
    backing,
    file,
    String(sizeBytes),
  ]);
  await ownLikeDir(file); // a confined QEMU opens it as its own uid
}

/**
 * Rebase a qcow2 file onto a raw base, safely: every cluster where its old chain differs
 * from the base is written into it, so it no longer needs any layer in between.
 */
export async function rebaseOnto(disk: string, base: string): Promise<void> {
  await run(QEMU_IMG, ['rebase', '-q', '-f', 'qcow2', '-b', base, '-F', 'raw', disk]);
}

/**
 * Rewrite the backing file `disk`'s header names, copying nothing (`-u`): for layers moved
 * as a whole chain (a pack installed) whose contents stay valid over the new path.
 */
export async function setBacking(
  disk: string,
  backing: string,
  backingFormat: 'raw' | 'qcow2',
): Promise<void> {
  await run(QEMU_IMG, ['rebase', '-u', '-f', 'qcow2', '-F', backingFormat, '-b', backing, disk]);
}

export type { ChainOnDisk, LayerHeader } from '../vmm.js';

interface ImgInfo {
  filename: string;
  'backing-filename'?: string;
}

/**
 * Read the chain under `file` from the headers (`qemu-img info --backing-chain`, `-U`: a
 * running sandbox may hold a layer open). When a layer is missing the whole read fails,
 * so then it is walked one header at a time to name the first file that is not there.
 */
export async function readChain(file: string): Promise<ChainOnDisk> {
  const known = chains.get(file);
  const now = known && (await layerIds(known.chain));
  if (known && now?.every((id, i) => id !== undefined && id === known.ids[i])) {
    return known.chain;
  }
  const chain = await readChainNow(file);
  chains.delete(file);
  if (chain.missing === null) {
    chains.set(file, { chain, ids: await layerIds(chain) });
    if (chains.size > CHAINS_KEPT) chains.delete(chains.keys().next().value as string);
  }
  return chain;
}

/**
 * Chains read before, by top file, with each layer file's identity then. Every fork checks
 * its snapshot's chain, and a qemu-img run costs a fork 50–300 ms on a loaded host; a layer
 * rewritten, replaced or removed changes its identity, so an unchanged chain is its stats.
 */
const chains = new Map<string, { chain: ChainOnDisk; ids: (string | undefined)[] }>();
const CHAINS_KEPT = 256;

function layerIds(chain: ChainOnDisk): Promise<(string | undefined)[]> {
  return Promise.all(
    chain.layers.map(async (l) => {
      const st = await stat(l.file, { bigint: true }).catch(() => undefined);
      return st && `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    }),
  );
}

async function readChainNow(file: string): Promise<ChainOnDisk> {
  try {
    const { stdout } = await run(QEMU_IMG, [
      'info',
      '-U',
      '--backing-chain',
      '--output=json',
      file,
    ]);
    const infos = JSON.parse(stdout) as ImgInfo[];
    return { layers: infos.map(toHeader), missing: null };
  } catch {
    return walkChain(file);
  }
}

async function walkChain(file: string): Promise<ChainOnDisk> {
  const layers: LayerHeader[] = [];
  for (let f: string | null = file; f !== null;) {
    if (!existsSync(f)) return { layers, missing: f };
    const { stdout } = await run(QEMU_IMG, ['info', '-U', '--output=json', f]);
    const header = toHeader(JSON.parse(stdout) as ImgInfo);
    layers.push(header);
    f = header.backing === null ? null : resolve(dirname(header.file), header.backing);
  }
  return { layers, missing: null };
}

function toHeader(i: ImgInfo): LayerHeader {
  return { file: i.filename, backing: i['backing-filename'] ?? null };
}

/** A disk layer of a running VM: its QMP node, its file, the disk's virtual size. */
export interface Layer {
  node: string;
  file: string;
  size: number;
}

interface BlockInfo {
  qdev?: string;
  inserted?: {
    'node-name'?: string;
    image?: { 'virtual-size'?: number; 'backing-filename'?: string };
  };
}

interface NodeInfo {
  'node-name': string;
  drv: string;
  file: string;
  backing_file?: string;
  image?: { 'backing-filename'?: string };
}

/** The file of a layer by its node name (disk0 → overlay.qcow2, diskN → overlay-N.qcow2). */
function layerFile(dir: string, node: string): string {
  const n = layerNumber(node);
  return join(dir, n === 0 ? 'overlay.qcow2' : `overlay-${n}.qcow2`);
}

function layerNumber(node: string): number {
  return Number(/(\d+)$/.exec(node)?.[1] ?? 0);
}

async function topBlock(vm: Vm): Promise<NonNullable<BlockInfo['inserted']>> {
  const blocks = await monitor(vm).execute<BlockInfo[]>('query-block');
  const disk = blocks.find((b) => b.qdev?.includes('vblk0'))?.inserted;
  if (!disk?.['node-name']) throw new ForkdError('internal', 'QEMU reports no disk on the VM');
  return disk;
}

/**
 * The layer the VM's disk writes to now (it changes with every branch). Its file follows
 * from the node name: QEMU reports a `json:` pseudo-name once a backing string changed.
 */
export async function topLayer(vm: Vm): Promise<Layer> {
  const disk = await topBlock(vm);
  const node = disk['node-name'] as string;
  const size = disk.image?.['virtual-size'];
  if (!size) throw new ForkdError('internal', 'QEMU reports no disk size on the VM');
  return { node, file: layerFile(vm.spec.dir, node), size };
}

/** The layer a VM writes to after its next freeze. */
export function nextLayer(vm: Vm, top: Layer): Layer {
  const node = `disk${layerNumber(top.node) + 1}`;
  return { node, file: layerFile(vm.spec.dir, node), size: top.size };
}

/**
 * Open a layer made by {@link createLayerOver} in the VM, while it still runs, so the
 * pause holds only the switch. Added with no backing and then switched to with
 * `blockdev-snapshot`, its header stays as written (the -sync variant would write QEMU's
 * own, ever longer, name for the frozen node).
 */
export async function openLayer(vm: Vm, layer: Layer): Promise<void> {
  await monitor(vm).execute('blockdev-add', {
    driver: 'qcow2',
    'node-name': layer.node,
    file: { driver: 'file', filename: layer.file },
    backing: null,
  });
}

/** Freeze `top` (the VM must be stopped): from now on the VM writes to `next`. */
export async function switchLayer(vm: Vm, top: Layer, next: Layer): Promise<void> {
  await monitor(vm).execute('blockdev-snapshot', { node: top.node, overlay: next.node });
}

/** Close a layer opened but never switched to (its name would block the next branch). */
export async function closeLayer(vm: Vm, layer: Layer): Promise<void> {
  await monitor(vm).execute('blockdev-del', { 'node-name': layer.node });
}

/** The backing file the VM's top layer's header names ('' when none). */
export async function topBackingName(vm: Vm): Promise<string> {
  return (await topBlock(vm)).image?.['backing-filename'] ?? '';
}

/** The node name of the layer the VM's disk writes to now. */
export async function topNodeName(vm: Vm): Promise<string> {
  return (await topBlock(vm))['node-name'] as string;
}

interface BlockGraph {
  nodes: { id: number; type: string; name: string }[];
  edges: { parent: number; child: number; name: string }[];
}

/**
 * The node a layer sits on, read from QEMU's block graph: node numbers say nothing once a
 * fold has dropped a layer from the middle (the layer under disk2 may be the image).
 */
async function backingNode(vm: Vm, node: string): Promise<string | undefined> {
  const g = await monitor(vm).execute<BlockGraph>('x-debug-query-block-graph');
  const me = g.nodes.find((n) => n.name === node && n.type === 'block-driver');
  const edge = g.edges.find((e) => e.parent === me?.id && e.name === 'backing');
  return g.nodes.find((n) => n.id === edge?.child)?.name;
}

async function namedNodes(vm: Vm): Promise<NodeInfo[]> {
  return monitor(vm).execute<NodeInfo[]>('query-named-block-nodes', { flat: true });
}

/** Whether the VM still has a block node of that name. */
export async function hasNode(vm: Vm, node: string): Promise<boolean> {
  return (await namedNodes(vm)).some((x) => x['node-name'] === node);
}

/**
 * Fold the frozen layer `frozen` under the VM's top layer back into the top one
 * (`block-stream`, while the VM runs): the top layer then sits directly on what the frozen
 * one sat on, and its header names that. For a branch that failed after the switch: its top
 * layer names a disk that was never published. Idempotent, so a repair cut short by a crash
 * is simply run again: a fold job still in QEMU is waited for, a finished one is not redone.
 * Returns whether it folded anything.
 */
export async function foldBack(vm: Vm, frozen: string): Promise<boolean> {
  const top = await topNodeName(vm);
  const job = `fold-${top}`;
  const jobs = await monitor(vm).execute<{ id: string }[]>('query-jobs');
  if (jobs.some((j) => j.id === job)) {
    await waitJob(vm, job);
    return true;
  }
  if ((await backingNode(vm, top)) !== frozen) return false;
  const base = await backingNode(vm, frozen);
  const below = (await namedNodes(vm)).find((x) => x['node-name'] === frozen)?.image?.[
    'backing-filename'
  ];
  if (!base || !below) {
    throw new ForkdError('internal', `cannot find the layers under ${top} to repair its chain`);
  }
  await streamInto(vm, top, base, below);
  return true;
}

/** The files the VM's disk has open: every layer of its chain, and the image. */
export async function openFiles(vm: Vm): Promise<Set<string>> {
  const nodes = await namedNodes(vm);
  return new Set(nodes.filter((x) => x.drv === 'file').map((x) => x.file));
}

/** Whether a file name is one of a sandbox's layers (overlay.qcow2, overlay-N.qcow2). */
export function isLayerFile(name: string): boolean {
  return /^overlay(-\d+)?\.qcow2$/.test(name);
}

/**
 * Fold the layer the VM's top layer sits on into the top one, when its header names
 * `header` (a snapshot about to be removed while this VM layers on it). Returns the file
 * the folded layer was opened from (the VM no longer uses it), or null when the top layer
 * already names `below` (a fold a crash interrupted finished in QEMU meanwhile).
 */
export async function foldUnderTop(
  vm: Vm,
  header: string,
  below: string | null,
): Promise<string | null> {
  const named = await topBackingName(vm);
  if (named === (below ?? '')) return null;
  if (named !== header) {
    throw new ForkdError('internal', `the disk layers on ${named}, not on ${header}`);
  }
  const top = await topNodeName(vm);
  const under = await backingNode(vm, top);
  const file = (await namedNodes(vm)).find((x) => x['node-name'] === under)?.file;
  if (!under || !file) throw new ForkdError('internal', `no layer under ${top} to fold`);
  await foldBack(vm, under);
  return file;
}

/**
 * Forget a layer made for a switch that never happened: its node (if it was opened) and
 * its file. Never the layer the VM writes to.
 */
export async function discardLayer(vm: Vm, layer: Layer): Promise<void> {
  if ((await topNodeName(vm)) === layer.node) {
    throw new ForkdError('internal', `layer ${layer.node} is the one the disk writes to`);
  }
  if (await hasNode(vm, layer.node)) await closeLayer(vm, layer);
  await rm(layer.file, { force: true });
}

const STREAM_POLL_MS = 50;

/** Copy into `node` what the layers between it and `base` hold, then drop those layers. */
async function streamInto(vm: Vm, node: string, base: string, header: string): Promise<void> {
  const job = `fold-${node}`;
  await monitor(vm).execute('block-stream', {
    'job-id': job,
    device: node,
    'base-node': base,
    'backing-file': header,
    'auto-dismiss': false,
  });
  crashPoint('fold:started');
  await waitJob(vm, job);
}

/** Wait for a block job to conclude, dismiss it, and fail with its error if it had one. */
async function waitJob(vm: Vm, job: string): Promise<void> {
  const qmp = monitor(vm);
  for (;;) {
    const jobs = await qmp.execute<{ id: string; status: string; error?: string }[]>('query-jobs');
    const j = jobs.find((x) => x.id === job);
    if (!j || j.status === 'concluded') {
      if (j) await qmp.execute('job-dismiss', { id: job });
      if (j?.error) throw new ForkdError('internal', `folding the disk layer failed: ${j.error}`);
      return;
    }
    await new Promise((r) => setTimeout(r, STREAM_POLL_MS));
  }
}
