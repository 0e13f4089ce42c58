/**
 * What a pack of a snapshot holds: every snapshot of its chain, root first (manifest.json
 * and the files it lists: `memory` or `memory.diff`, `vmstate`, `disk.qcow2` — never a
 * materialized memory cache), and its image (rootfs.ext4, image.json). Each snapshot file is
 * hashed again here and compared with its snapshot's manifest, so a pack is never made of a
 * damaged snapshot; the image's write-once files keep their digest while unchanged on
 * disk. Paths inside the pack are the paths under FORKD_HOME.
 */
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { imageFiles } from '../images/store.js';
import {
  describeFile,
  readManifest,
  sha256File,
  sha256StableFile,
  type SnapshotManifest,
} from '../snapshots/files.js';
import {
  hostRequirements,
  imagePath,
  PACK_FORMAT_VERSION,
  snapshotPath,
  type PackFile,
  type PackManifest,
} from './manifest.js';

/** A snapshot's chain, root first, read from the manifests on disk. */
export async function chainOf(p: Paths, top: SnapshotManifest): Promise<SnapshotManifest[]> {
  const chain = [top];
  for (let cur = top; cur.parent;) {
    cur = await readManifest(p, cur.parent);
    chain.unshift(cur);
  }
  return chain;
}

/** Hash one file under FORKD_HOME as a pack entry (`hash`: an image's file is write-once). */
async function entry(p: Paths, path: string, hash = sha256File): Promise<PackFile> {
  const slash = path.lastIndexOf('/');
  const f = await describeFile(join(p.home, path.slice(0, slash)), path.slice(slash + 1), hash);
  return { path, size: f.size, allocated: f.allocated, sha256: f.sha256 };
}

/** The pack manifest of `top` (its files hashed now, checked against their snapshots). */
export async function collectPack(p: Paths, top: SnapshotManifest): Promise<PackManifest> {
  const chain = await chainOf(p, top);
  const files: PackFile[] = [];
  for (const m of chain) {
    files.push(await entry(p, snapshotPath(m.tag, 'manifest.json')));
    for (const f of Object.values(m.files)) {
      const got = await entry(p, snapshotPath(m.tag, f.name));
      if (got.sha256 !== f.sha256 || got.size !== f.size) {
        throw new ForkdError(
          'snapshot_not_bootable',
          `snapshot "${m.tag}" has a file that changed since it was made (${f.name}): nothing was packed; see \`forkd snapshot verify ${top.tag}\``,
          { tag: m.tag, file: f.name },
        );
      }
      files.push(got);
    }
  }
  const image = chain[0]?.image ?? null;
  if (image) {
    const img = imageFiles(p, image);
    for (const file of [img.manifest, img.rootfs]) {
      const path = imagePath(image, file.slice(img.dir.length + 1));
      files.push(await entry(p, path, sha256StableFile));
    }
  }
  return {
    format: 'forkd-pack',
    format_version: PACK_FORMAT_VERSION,
    tag: top.tag,
    chain: chain.map((m) => m.tag),
    image: image ? { name: image, included: true } : null,
    files,
    host: await hostRequirements(top),
    // The snapshot's own time, not the pack's: the same snapshot packs (and pushes) the same
    // bytes, so a second push of it finds every blob, its config too, in the registry.
    created_at: top.created_at,
  };
}
