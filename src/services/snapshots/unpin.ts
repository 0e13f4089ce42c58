/**
 * A branch never pins its source: after a branch the source's disk layers on the branch's
 * frozen layer, so removing that snapshot first folds the layer into the source (QEMU
 * `block-stream`, while it runs, as the repair of a failed branch does); the source then
 * layers on the snapshot below, its data intact. Only sandboxes forked from a snapshot
 * (whose overlay sits on its disk from the start) are killed by `rmi --force`.
 */
import { rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Paths } from '../../config.js';
import type { SandboxHost } from '../sandboxes/host.js';
import type { ServiceLog } from '../log.js';
import { diskOf, layerBelow } from './chain.js';
import type { SnapshotManifest } from './files.js';
import { vmm } from '../vmm.js';

/** Fold `m`'s layer into every running source that layers on it; they then layer on its parent. */
export async function unpinSources(
  ctx: { paths: Paths; sandboxes: SandboxHost; log: ServiceLog },
  m: SnapshotManifest,
): Promise<string[]> {
  const ids = ctx.sandboxes.layeredOn(m.tag);
  const header = diskOf(ctx.paths, m.tag);
  const below = layerBelow(ctx.paths, m);
  for (const id of ids) {
    const source = await ctx.sandboxes.lease(id);
    const folded = await vmm().disks.foldUnderTop(source.vm, header, below);
    source.setDiskBase(m.parent);
    // Its other name, in the source's dir: nothing opens it any more.
    if (folded && dirname(folded) === source.vm.spec.dir) await rm(folded, { force: true });
    ctx.log.info({ sandbox: id, snapshot: m.tag }, 'folded a removed snapshot into its source');
  }
  return ids;
}
