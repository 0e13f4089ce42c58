/**
 * Turning a directory tree into an image: `mkfs.ext4 -d` writes the tree straight into a
 * sparse file, so building needs no mount, no loop device and no root. Every source
 * (a user's dir, busybox, debootstrap) ends here.
 */
import { chmod, lstat, open, readdir, stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError, isForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { crashPoint } from '../../util/crash.js';
import { assertImageUnused } from './users.js';
import { asDiskFull, diskFull, hostIsFull } from '../disk-full.js';
import {
  assertNameFree,
  createStaging,
  imageFiles,
  imageLayout,
  publishStaging,
  removeTree,
  validateImageName,
  type Image,
  type ImageConfig,
  type ImageManifest,
  type ImageSource,
} from './store.js';

/** Receives one human-readable line per build step. */
export type Progress = (line: string) => void;

/** What every build takes besides its source. */
export interface BuildOptions {
  name: string;
  /** Filesystem size; default max(256 MiB, 2 × content + 128 MiB). */
  sizeMiB?: number;
  /** Replace an existing image of that name instead of failing with `name_taken`. */
  force?: boolean;
  /** A cache entry: removed once unused for the daemon's image cache time (cache-images.ts). */
  cache?: boolean;
}

const MiB = 1024 * 1024;
const BLOCK = 4096;
/** mke2fs's default bytes-per-inode for ordinary filesystems. */
const INODE_RATIO = 16384;

/** Build an image from an existing directory tree. */
export function buildImageFromDir(
  p: Paths,
  opts: BuildOptions & { dir: string },
  onProgress?: Progress,
): Promise<Image> {
  const dir = resolve(opts.dir);
  return buildImage(p, opts, { kind: 'dir', dir }, dir, onProgress);
}

/**
 * The one build pipeline: validate, stage, fill the tree (a dir, or a function that
 * populates a scratch tree inside the staging dir), mkfs, write image.json, publish.
 * Any failure removes the staging dir.
 */
export async function buildImage(
  p: Paths,
  opts: BuildOptions,
  source: ImageSource,
  tree: string | ((root: string) => Promise<void>),
  onProgress: Progress = () => undefined,
  extras: BuildExtras = {},
): Promise<Image> {
  validateImageName(opts.name);
  if (opts.sizeMiB !== undefined) validateSize(opts.sizeMiB);
  if (typeof tree === 'string') await requireDir(tree);
  // Checked again when the build is published: users may come meanwhile.
  if (!opts.force) await assertNameFree(p, opts.name);
  else await assertImageUnused(p, opts.name, 'replace');
  const staging = await createStaging(p);
  const scratch = typeof tree !== 'string';
  try {
    const root = scratch ? join(staging, 'rootfs') : tree;
    if (scratch) await tree(root);
    const files = imageLayout(staging);
    await makeExt4(root, files.rootfs, opts.sizeMiB, onProgress, extras.afterMkfs, staging);
    if (scratch) await removeTree(root);
    const manifest = await describe(opts.name, files.rootfs, source);
    if (extras.config) manifest.config = extras.config;
    if (opts.cache) manifest.cache = true;
    await writeFile(files.manifest, JSON.stringify(manifest, null, 2) + '\n');
    crashPoint('image:staged');
    await publishStaging(p, staging, opts.name, Boolean(opts.force));
    onProgress(`image ${opts.name} ready`);
    return { ...manifest, path: imageFiles(p, opts.name).rootfs };
  } catch (e) {
    // The build's error is the one to report; a staging dir that cannot go yet (still
    // mounted) is left for the sweep in listImages.
    await removeTree(staging).catch(() => undefined);
    throw await asDiskFull(e, p.images, `image build of ${opts.name}`);
  }
}

/** What some sources add to a build: image.json's config, a step on the fresh ext4 file. */
export interface BuildExtras {
  config?: ImageConfig;
  /** Runs on the (still writable) rootfs file right after mkfs; `scratch` is a temp dir. */
  afterMkfs?: (rootfs: string, scratch: string) => Promise<void>;
}

/** Journal kept on purpose: guests get killed, and replay keeps their disks consistent. */
async function makeExt4(
  root: string,
  file: string,
  sizeMiB: number | undefined,
  onProgress: Progress,
  afterMkfs?: (rootfs: string, scratch: string) => Promise<void>,
  scratch?: string,
): Promise<void> {
  const usage = await treeUsage(root);
  const mib = sizeMiB ?? defaultSizeMiB(usage.bytes);
  const inodes = Math.max(2 * usage.entries + 4096, Math.floor((mib * MiB) / INODE_RATIO));
  onProgress(`writing a ${mib} MiB ext4 filesystem (${usage.entries} entries)`);
  await createSparse(file, mib * MiB);
  const args = ['-F', '-q', '-b', String(BLOCK), '-N', String(inodes), '-m', '0'];
  // Initialise inode tables and journal now: otherwise every guest's kernel would zero them
  // lazily after boot, writing into its own overlay and burning guest CPU.
  args.push('-L', 'forkd-root', '-E', 'root_owner=0:0,lazy_itable_init=0,lazy_journal_init=0');
  await run('mkfs.ext4', [...args, '-d', root, file]).catch(async (e: unknown) => {
    // Both a full host disk and a too-small image make mkfs say it is out of space.
    if (await hostIsFull(file)) throw diskFull('image build (mkfs.ext4)');
    throw tooSmall(e, mib, usage.bytes) ?? e;
  });
  if (afterMkfs) await afterMkfs(file, scratch ?? root);
  await chmod(file, 0o444);
}

/** max(256 MiB, 2 × content + 128 MiB): room for the guest to write, rounded to MiB. */
export function defaultSizeMiB(contentBytes: number): number {
  return Math.max(256, Math.ceil((2 * contentBytes + 128 * MiB) / MiB));
}

async function requireDir(dir: string): Promise<void> {
  const isDir = await stat(dir).then(
    (s) => s.isDirectory(),
    () => false,
  );
  if (isDir) return;
  throw new ForkdError(
    'bad_request',
    `${dir} is not a directory: pass the root of the tree to pack`,
    {
      dir,
    },
  );
}

function validateSize(sizeMiB: number): void {
  if (Number.isInteger(sizeMiB) && sizeMiB >= 16 && sizeMiB <= 16 * 1024 * 1024) return;
  throw new ForkdError('bad_request', `image size ${sizeMiB} MiB is out of range: use 16M to 16T`, {
    sizeMiB,
  });
}

/** mkfs out of space means the requested size was too small for the tree. */
function tooSmall(e: unknown, mib: number, contentBytes: number): ForkdError | undefined {
  if (!isForkdError(e, 'internal') || !/Could not allocate|No space/i.test(e.message)) return;
  return new ForkdError(
    'bad_request',
    `${mib} MiB is too small for ${Math.ceil(contentBytes / MiB)} MiB of content: ` +
      `pass a larger --size, or omit it for ${defaultSizeMiB(contentBytes)} MiB`,
    { sizeMiB: mib, contentBytes },
  );
}

async function createSparse(file: string, bytes: number): Promise<void> {
  const fh = await open(file, 'wx', 0o644);
  try {
    await fh.truncate(bytes);
  } finally {
    await fh.close();
  }
}

/** Content bytes (files rounded up to whole blocks) and entry count of a tree. */
async function treeUsage(dir: string): Promise<{ bytes: number; entries: number }> {
  const names = await readdir(dir);
  const parts = await Promise.all(
    names.map(async (n) => {
      const path = join(dir, n);
      const st = await lstat(path);
      const own = { bytes: Math.ceil(st.size / BLOCK) * BLOCK, entries: 1 };
      if (!st.isDirectory()) return own;
      const sub = await treeUsage(path);
      return { bytes: own.bytes + sub.bytes, entries: 1 + sub.entries };
    }),
  );
  return parts.reduce((a, b) => ({ bytes: a.bytes + b.bytes, entries: a.entries + b.entries }), {
    bytes: 0,
    entries: 0,
  });
}

async function describe(name: string, rootfs: string, source: ImageSource): Promise<ImageManifest> {
  const st = await stat(rootfs);
  return {
    name,
    format: 'ext4',
    size_bytes: st.size,
    disk_bytes: st.blocks * 512,
    created_at: new Date().toISOString(),
    source,
  };
}
