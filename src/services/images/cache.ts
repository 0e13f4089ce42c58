/**
 * The layer cache: every blob (layer, config) of every pulled or imported image, once, by
 * digest, under `FORKD_HOME/cache/blobs/sha256/`. A blob enters only whole and verified (it
 * is written to a temp name and renamed), so a failed pull never leaves an entry; a second
 * image sharing layers takes them from here. `forkd image prune` drops blobs no image names.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Paths } from '../../config.js';
import { DIGEST, verifier } from '../../drivers/registry/index.js';
import { ForkdError } from '../../errors.js';
import { pidAlive } from '../../util/pid.js';
import { listImages } from './store.js';
import { fileSink } from '../../util/file-sink.js';

export function blobDir(p: Paths): string {
  return join(p.home, 'cache', 'blobs', 'sha256');
}

/** The cache file of a digest (checked first: it becomes a file name). */
export function blobPath(p: Paths, digest: string): string {
  if (!DIGEST.test(digest)) {
    throw new ForkdError(
      'image_format_unsupported',
      `${JSON.stringify(digest)} is not a sha256 digest`,
      { digest },
    );
  }
  return join(blobDir(p), digest.slice(7));
}

export async function hasBlob(p: Paths, digest: string): Promise<boolean> {
  return stat(blobPath(p, digest)).then(
    (s) => s.isFile(),
    () => false,
  );
}

/**
 * Add a blob through `fill`, which writes the bytes to the temp path it is given (and
 * verifies them); renamed into place only when `fill` succeeded.
 */
export async function addBlob(
  p: Paths,
  digest: string,
  fill: (tmp: string) => Promise<void>,
): Promise<string> {
  const dest = blobPath(p, digest);
  await mkdir(blobDir(p), { recursive: true });
  const tmp = join(blobDir(p), `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
  try {
    await fill(tmp);
    await rename(tmp, dest);
    return dest;
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
}

/** Copy a local file into the cache, verified against its digest (and size when known). */
export async function addBlobFromFile(
  p: Paths,
  digest: string,
  file: string,
  size?: number,
): Promise<string> {
  if (await hasBlob(p, digest)) return blobPath(p, digest);
  return addBlob(p, digest, async (tmp) => {
    const sink = await fileSink(tmp, 'wx'); // before the source exists: see fileSink
    await pipeline(createReadStream(file), verifier(digest, size), sink);
  });
}

/** A download's temp blob whose process is gone (a daemon killed mid-pull). */
const deadTemp = (name: string) =>
  name.startsWith('.tmp-') && !pidAlive(Number(name.split('-')[1]));

/** Remove the temp blobs of pulls whose process died (the daemon's start, after a crash). */
export async function sweepTempBlobs(p: Paths): Promise<void> {
  for (const name of await readdir(blobDir(p)).catch(() => [] as string[])) {
    if (deadTemp(name)) await rm(join(blobDir(p), name), { force: true });
  }
}

/** Remove every cached blob no image records; answers what went. */
export async function pruneBlobs(p: Paths): Promise<{ blobs: number; bytes: number }> {
  const used = new Set<string>();
  for (const image of await listImages(p)) {
    const src = image.source as { blobs?: string[] };
    for (const d of src.blobs ?? []) used.add(d.slice(7));
  }
  let blobs = 0;
  let bytes = 0;
  for (const name of await readdir(blobDir(p)).catch(() => [] as string[])) {
    if (used.has(name)) continue;
    const file = join(blobDir(p), name);
    // A temp file of a pull in progress is left alone (its pid is alive).
    if (name.startsWith('.tmp-') && !deadTemp(name)) continue;
    const st = await stat(file).catch(() => undefined);
    await rm(file, { force: true });
    blobs++;
    bytes += st?.size ?? 0;
  }
  return { blobs, bytes };
}
