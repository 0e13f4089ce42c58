/**
 * Compacting a chained snapshot: its disk becomes one qcow2 layer directly over its image
 * (the layers of its parent snapshots folded in), so it no longer depends on them. Its
 * memory becomes full too: a full memory, or a diff's materialized one, is shared by hard
 * link with the device state (snapshots are immutable, so sharing an inode is safe and
 * costs nothing).
 */
import { copyFile, link } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { imageFiles } from '../images/index.js';
import { snapshotDir, SNAPSHOT_FILES, type SnapshotManifest } from './files.js';
import { materialize } from './memory.js';
import { vmm } from '../vmm.js';

/** Write a standalone copy of snapshot `m` into `staging`. */
export async function flattenInto(p: Paths, m: SnapshotManifest, staging: string): Promise<void> {
  if (!m.image)
    throw new ForkdError('bad_request', `snapshot "${m.tag}" has no image to flatten onto`);
  const src = snapshotDir(p, m.tag);
  await link((await materialize(p, m)).path, join(staging, SNAPSHOT_FILES.memory));
  await link(join(src, SNAPSHOT_FILES.vmstate), join(staging, SNAPSHOT_FILES.vmstate));
  const base = imageFiles(p, m.image).rootfs;
  // A safe rebase onto the image writes into the copy every cluster where the old chain
  // (parent layers included) differs from the image: the result needs no parent snapshot.
  const disk = join(staging, SNAPSHOT_FILES.disk);
  await copyFile(join(src, SNAPSHOT_FILES.disk), disk);
  await vmm().disks.rebaseOnto(disk, base);
}
