/**
 * The image store: `images/<name>/{rootfs.ext4,image.json}` under FORKD_HOME. Every build
 * happens in an `images/.staging-<pid>-<random>/` directory that is renamed into place only
 * when complete, so a crash never leaves a half-built image under a real name (DESIGN.md
 * "State on disk"). Removal renames first for the same reason.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  chmod,
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  realpath,
  rename,
  rm,
  stat,
} from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { NAME_RULE } from '../../contract/rules.js';
import { checkName } from '../checks.js';
import { run } from '../../util/exec.js';
import { pidAlive } from '../../util/pid.js';
import { assertImageUnused, rememberBootSizes, removeBootSnapshots } from './users.js';

/** Where an image's files came from, recorded in image.json. */
export type ImageSource =
  | { kind: 'dir'; dir: string }
  | { kind: 'debian'; suite: string; packages: string[]; mirror: string }
  | { kind: 'busybox'; version: string }
  | {
      kind: 'oci';
      reference: string;
      /** The image manifest's digest (an index resolved to the platform). */
      digest: string;
      platform: string;
      /** The cached blobs it was built from (layers), kept by `image prune`. */
      blobs: string[];
    }
  | {
      kind: 'archive';
      file: string;
      format: 'oci-layout' | 'docker-save';
      digest: string;
      platform: string;
      blobs: string[];
    };

/** An OCI image config's defaults for the sandboxes of the image. */
export interface ImageConfig {
  /** `KEY=VALUE` entries. */
  env: string[];
  working_dir?: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
}

/** An image's image.json (snake_case: this is also the wire form). */
export interface ImageManifest {
  name: string;
  format: 'ext4';
  /** Logical size of rootfs.ext4 (the guest's disk size). */
  size_bytes: number;
  /** Bytes the sparse rootfs.ext4 really occupies on the host. */
  disk_bytes: number;
  created_at: string;
  source: ImageSource;
  /** Set for images from OCI/Docker images: their config's Env, WorkingDir, User, Entrypoint, Cmd. */
  config?: ImageConfig;
  /** A cache entry (a container image's root, made by the shim): removed once unused. */
  cache?: true;
}

/** An image as the service returns it: its manifest plus where its rootfs is. */
export interface Image extends ImageManifest {
  /** The rootfs.ext4 on the host (derived, not stored, so a home can be moved). */
  path: string;
}

/** The files of one image. */
export interface ImageFiles {
  dir: string;
  rootfs: string;
  manifest: string;
}

const STAGING_PREFIX = '.staging-';
/** A staging dir whose builder is gone and that is older than this is debris of a crash. */
const STALE_MS = 60 * 60 * 1000;

/** An image config's `KEY=VALUE` Env as a map (empty for images without a config). */
export function imageEnv(image: ImageManifest): Record<string, string> {
  const env: Record<string, string> = {};
  for (const entry of image.config?.env ?? []) {
    const eq = entry.indexOf('=');
    if (eq > 0) env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  return env;
}

/** Where and as whom a command runs when its request names neither (docs/images.md). */
export interface ExecDefaults {
  cwd?: string;
  user?: string;
}

/**
 * An image config's WorkingDir and User, which Docker applies to every command of a
 * container (`docker run IMG CMD`, `docker exec`): the same for every command in a sandbox
 * of the image, its forks included. The agent takes a user or uid, so a `user:group` runs
 * as that user with its own group.
 */
export function imageExecDefaults(image: ImageManifest): ExecDefaults {
  const cwd = image.config?.working_dir || undefined;
  const user = image.config?.user?.split(':')[0] || undefined;
  return { ...(cwd ? { cwd } : {}), ...(user ? { user } : {}) };
}

/** Image names follow the name rule (src/contract/rules.ts). */
export function validateImageName(name: string): void {
  checkName('image name', name);
}

/** Paths of the image `name` (which must be valid: it becomes a directory name). */
export function imageFiles(p: Paths, name: string): ImageFiles {
  validateImageName(name);
  return imageLayout(join(p.images, name));
}

/** The file names inside an image dir (published or staging). */
export function imageLayout(dir: string): ImageFiles {
  return { dir, rootfs: join(dir, 'rootfs.ext4'), manifest: join(dir, 'image.json') };
}

/**
 * The content identity of image `name` as it is now: a hash of its image.json and of its
 * rootfs file's inode, size and mtime. A rebuild under the same name (a new file renamed
 * into place) or any write to the rootfs changes it; what a boot snapshot is keyed by.
 */
export async function imageIdentity(p: Paths, name: string): Promise<string> {
  const files = imageFiles(p, name);
  const manifest = await readFile(files.manifest, 'utf8');
  const st = await stat(files.rootfs, { bigint: true });
  const hash = createHash('sha256').update(`${manifest}\n${st.ino}:${st.size}:${st.mtimeNs}`);
  return hash.digest('hex').slice(0, 32);
}

/** The image `name`; `image_not_found` says how to list or build one. */
export async function getImage(p: Paths, name: string): Promise<Image> {
  const image = await readImage(p, name);
  if (image) return image;
  throw new ForkdError(
    'image_not_found',
    `no image named ${JSON.stringify(name)}: list images with \`forkd images\`, ` +
      'build one with `forkd image build`',
    { name },
  );
}

/** Every complete image, by name. Also sweeps staging debris left by crashed builds. */
export async function listImages(p: Paths): Promise<Image[]> {
  const names = await readdir(p.images).catch(() => [] as string[]);
  await sweepStaleStaging(p, names);
  const images = await Promise.all(
    names.filter((n) => NAME_RULE.test(n)).map((n) => readImage(p, n)),
  );
  return images
    .filter((i): i is Image => i !== undefined)
    .sort((a, b) => (a.name < b.name ? -1 : 1));
}

/**
 * Remove the image `name` (renamed away first, so it disappears at once); refused
 * (`image_in_use`) while snapshots or sandboxes use it.
 */
export async function removeImage(p: Paths, name: string): Promise<Image> {
  const image = await getImage(p, name);
  await assertImageUnused(p, name, 'remove');
  await removeBootSnapshots(p, name);
  const trash = trashPath(p);
  await rename(imageFiles(p, name).dir, trash);
  await removeTree(trash);
  return image;
}

/** A fresh, empty staging directory for one build. */
export async function createStaging(p: Paths): Promise<string> {
  await mkdir(p.images, { recursive: true });
  const dir = await mkdtemp(join(p.images, `${STAGING_PREFIX}${process.pid}-`));
  // mkdtemp makes it 0700; QEMU may run as an unprivileged user that must read the image.
  await chmod(dir, 0o755);
  return dir;
}

/**
 * Move a complete staging dir to `images/<name>`. An existing image is `name_taken`
 * unless `force`, which replaces it (the old one is renamed away, then deleted).
 */
export async function publishStaging(
  p: Paths,
  staging: string,
  name: string,
  force: boolean,
): Promise<void> {
  const dest = imageFiles(p, name).dir;
  try {
    await rename(staging, dest);
    return;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    // ENOTDIR: the name is a symlink or file (test homes link a shared image in).
    if (code !== 'ENOTEMPTY' && code !== 'EEXIST' && code !== 'ENOTDIR') throw e;
    if (!force) throw nameTaken(name);
  }
  await assertImageUnused(p, name, 'replace');
  await rememberBootSizes(p, name, staging);
  await removeBootSnapshots(p, name);
  const trash = trashPath(p);
  await rename(dest, trash);
  await rename(staging, dest);
  await removeTree(trash);
}

/** Throws `name_taken` when an image `name` exists (a fast check before a long build). */
export async function assertNameFree(p: Paths, name: string): Promise<void> {
  const exists = await stat(imageFiles(p, name).dir).then(
    () => true,
    () => false,
  );
  if (exists) throw nameTaken(name);
}

/**
 * Delete a build tree. debootstrap mounts /proc, /sys and sometimes binds host /dev entries
 * inside its target; a recursive delete that followed one of those into the host would be a
 * disaster, so anything still mounted below `dir` is detached first.
 */
export async function removeTree(dir: string): Promise<void> {
  const real = await realpath(dir).catch(() => undefined);
  if (!real) return;
  for (const mountPoint of await mountsUnder(real)) await run('umount', ['-l', mountPoint]);
  if ((await mountsUnder(real)).length > 0) {
    throw new ForkdError(
      'internal',
      `${dir} still has mounts below it; unmount them, then delete it`,
    );
  }
  await rm(dir, { recursive: true, force: true });
}

async function mountsUnder(dir: string): Promise<string[]> {
  const info = await readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  return info
    .split('\n')
    .map((line) => unescapeMountPath(line.split(' ')[4] ?? ''))
    .filter((mp) => mp === dir || mp.startsWith(dir + '/'))
    .sort((a, b) => b.length - a.length);
}

/** mountinfo escapes space, tab, newline and backslash as \ooo. */
function unescapeMountPath(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

async function readImage(p: Paths, name: string): Promise<Image | undefined> {
  const files = imageFiles(p, name);
  try {
    const manifest = JSON.parse(await readFile(files.manifest, 'utf8')) as ImageManifest;
    return { ...manifest, path: files.rootfs };
  } catch {
    return undefined;
  }
}

/** A name in the staging namespace, so a crash mid-delete leaves only sweepable debris. */
function trashPath(p: Paths): string {
  return join(p.images, `${STAGING_PREFIX}${process.pid}-${randomBytes(6).toString('hex')}`);
}

function nameTaken(name: string): ForkdError {
  return new ForkdError(
    'name_taken',
    `an image named ${JSON.stringify(name)} already exists: pick another name, pass --force ` +
      `to replace it, or remove it with \`forkd image rm ${name}\``,
    { name },
  );
}

/**
 * Staging dirs are named after their builder's pid; sweep those whose builder is gone and
 * that are older than `minAgeMs` (a listing waits an hour, in case the builder runs in another
 * pid namespace; the daemon's start passes 0, as it does for snapshots' staging).
 */
async function sweepStaleStaging(p: Paths, names: string[], minAgeMs = STALE_MS): Promise<void> {
  for (const n of names.filter((x) => x.startsWith(STAGING_PREFIX))) {
    const pid = Number(n.slice(STAGING_PREFIX.length).split('-')[0]);
    if (pidAlive(pid)) continue;
    const dir = join(p.images, n);
    const age = await stat(dir).then(
      (s) => Date.now() - s.mtimeMs,
      () => 0,
    );
    if (age >= minAgeMs) await removeTree(dir).catch(() => undefined);
  }
}

/** Remove the staging dirs of builds whose process died (the daemon's start, after a crash). */
export async function sweepDeadStaging(p: Paths): Promise<void> {
  await sweepStaleStaging(p, await readdir(p.images).catch(() => [] as string[]), 0);
}
