/**
 * A snapshot's whole chain, checked against the manifests — its memory's (memory.ts) and its disk's: every backing file that
 * each layer's header names exists and is the disk the manifests record (the parent
 * snapshot's `disk.qcow2`, and at the bottom the image's rootfs). A manifest's own files
 * can all be intact while a layer below is gone or another file: forks would then fail
 * in QEMU ("Could not open backing file"), so the bootable check, verify and fork use this.
 */
import { realpath } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { imageFiles } from '../images/store.js';
import { memoryChainProblem } from './memory.js';
import {
  readManifest,
  snapshotDir,
  SNAPSHOT_FILES,
  unbootableReason,
  verifyFiles,
  type SnapshotManifest,
} from './files.js';
import { vmm } from '../vmm.js';

/** What is wrong with a chain: the layer at fault and a sentence naming it. */
export interface ChainProblem {
  file: string;
  problem: string;
}

/** The frozen disk layer of a published snapshot. */
export const diskOf = (p: Paths, tag: string) => join(snapshotDir(p, tag), SNAPSHOT_FILES.disk);

/** What `m`'s layer must name as its backing file: its parent's disk, or its image's rootfs. */
export function layerBelow(p: Paths, m: SnapshotManifest): string | null {
  if (m.parent) return diskOf(p, m.parent);
  return m.image ? imageFiles(p, m.image).rootfs : null;
}

/**
 * The first problem of `m`'s chain, or null when every disk layer is the one recorded and
 * every memory its diffs are over is there (memory.ts).
 */
export async function chainProblem(p: Paths, m: SnapshotManifest): Promise<ChainProblem | null> {
  return (await diskChainProblem(p, m)) ?? (await memoryChainProblem(p, m));
}

async function diskChainProblem(p: Paths, m: SnapshotManifest): Promise<ChainProblem | null> {
  const chain = await vmm().disks.readChain(diskOf(p, m.tag));
  if (chain.missing !== null) {
    const by = chain.layers.at(-1)?.file;
    return {
      file: chain.missing,
      problem: `missing layer ${chain.missing}${by ? ` (named by the header of ${by})` : ''}`,
    };
  }
  let cur: SnapshotManifest = m;
  for (const layer of chain.layers) {
    const expected = layerBelow(p, cur);
    if (!(await samePath(layer.backing, expected))) {
      return {
        file: layer.file,
        problem: `layer ${layer.file} names ${layer.backing ?? 'no backing file'}, but snapshot "${cur.tag}" records ${expected ?? 'none'}`,
      };
    }
    if (!cur.parent) break; // the next file is the image, which names nothing
    const parent = await readManifest(p, cur.parent).catch(() => undefined);
    if (!parent) {
      const problem = `layer ${expected} belongs to snapshot "${cur.parent}", which has no manifest`;
      return { file: expected as string, problem };
    }
    cur = parent;
  }
  return null;
}

/** Equal as named, or the same file once links are resolved (an image dir may be linked). */
async function samePath(a: string | null, b: string | null): Promise<boolean> {
  if (a === b) return true;
  if (a === null || b === null) return false;
  const [ra, rb] = await Promise.all([realpath(a).catch(() => a), realpath(b).catch(() => b)]);
  return ra === rb;
}

/**
 * `verify` of a snapshot: its files and those of every snapshot below it re-hashed against
 * their manifests, and the chain's headers checked (above).
 */
export async function verifyChain(
  p: Paths,
  m: SnapshotManifest,
): Promise<{ file: string; problem: string }[]> {
  const bad: { file: string; problem: string }[] = [];
  for (let cur: SnapshotManifest | undefined = m; cur;) {
    bad.push(...(await verifyFiles(p, cur)));
    cur = cur.parent ? await readManifest(p, cur.parent).catch(() => undefined) : undefined;
  }
  const chain = await chainProblem(p, m);
  if (chain) bad.push(chain);
  return bad;
}

/** Why `m` cannot be restored: a file of its own (not bootable) or its chain (broken). */
export async function restoreProblem(
  p: Paths,
  m: SnapshotManifest,
): Promise<{
  code: 'snapshot_not_bootable' | 'snapshot_broken';
  reason: string;
  file?: string;
} | null> {
  const own = await unbootableReason(p, m);
  if (own) return { code: 'snapshot_not_bootable', reason: own };
  const chain = await chainProblem(p, m);
  return chain ? { code: 'snapshot_broken', reason: chain.problem, file: chain.file } : null;
}
