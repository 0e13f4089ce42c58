/**
 * Cache images expire. An image made as a cache entry (`cache: true`: a container image's
 * root, which the containerd shim imports once per layer chain; docs/kubernetes.md) is
 * removed, with its boot snapshots, once no sandbox or snapshot uses it and none has for the
 * daemon's image cache time: as kubelet's image garbage collection does for containerd's
 * copy, the cache follows use, not a person running a command. Its last use is the latest
 * of its creation and the last change of a sandbox row of it (an ended sandbox's row says
 * when it ended, and is kept for the daemon's retention of ended sandboxes, 24 h by
 * default). The daemon sweeps every few minutes; `image prune` removes every unused one now.
 */
import { existsSync } from 'node:fs';
import type { Paths } from '../../config.js';
import { isForkdError } from '../../errors.js';
import { Store } from '../../store/db.js';
import { ACTIVE_STATES, type SandboxRow } from '../../store/sandboxes.js';
import { listImages, removeImage, type Image, type ImageManifest } from './store.js';
import { bootSnapshotsOf } from './users.js';

/** The image cache time by default: a day unused. */
export const DEFAULT_CACHE_TTL_S = 24 * 3600;
/** How often the daemon looks for expired cache images. */
export const SWEEP_MS = 5 * 60_000;

type Row = Pick<SandboxRow, 'image' | 'state' | 'updated_at'>;

/**
 * The cache images among `images` that expired at `now`: no sandbox of them is starting or
 * running (in any tier), and their last use is `ttlMs` or more ago. Snapshots of them are
 * checked at removal (removeImage refuses an image a snapshot needs).
 */
export function expiredImages(
  images: Pick<ImageManifest, 'name' | 'created_at' | 'cache'>[],
  rows: Row[],
  ttlMs: number,
  now: number,
): string[] {
  return images
    .filter((image) => image.cache)
    .filter((image) => {
      const mine = rows.filter((r) => r.image === image.name);
      if (mine.some((r) => ACTIVE_STATES.includes(r.state))) return false;
      const uses = [image.created_at, ...mine.map((r) => r.updated_at)].map((t) => Date.parse(t));
      return now - Math.max(...uses) >= ttlMs;
    })
    .map((image) => image.name);
}

function sandboxRows(p: Paths): Row[] {
  if (!existsSync(p.db)) return [];
  const store = Store.open(p.db);
  try {
    return store.sandboxes.list();
  } finally {
    store.close();
  }
}

/**
 * Remove the cache images unused for `ttlMs` (0: every unused one) and their boot
 * snapshots; `dropPools` ends the pre-started VMs of those snapshots once they are gone.
 * Returns the names removed; one a snapshot needs, or that a sandbox took meanwhile, stays.
 */
export async function expireCacheImages(
  p: Paths,
  ttlMs: number,
  dropPools: (tags: string[]) => Promise<void>,
): Promise<string[]> {
  const names = expiredImages(await listImages(p), sandboxRows(p), ttlMs, Date.now());
  const removed: string[] = [];
  for (const name of names) {
    try {
      await removeImageAndPools(p, name, dropPools);
    } catch (e) {
      if (isForkdError(e, 'image_in_use') || isForkdError(e, 'image_not_found')) continue;
      throw e;
    }
    removed.push(name);
  }
  return removed;
}

/**
 * Remove image `name` with its boot snapshots, then end those snapshots' pre-started VMs:
 * a pool VM of a snapshot whose files are gone could never be forked, only cost memory.
 */
export async function removeImageAndPools(
  p: Paths,
  name: string,
  dropPools: (tags: string[]) => Promise<void>,
): Promise<Image> {
  const boots = (await bootSnapshotsOf(p, name)).map((m) => m.tag);
  const image = await removeImage(p, name);
  await dropPools(boots);
  return image;
}
