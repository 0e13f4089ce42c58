/**
 * The images service: read-only ext4 root filesystems under FORKD_HOME/images, built from a
 * directory, the host's static busybox, or a Debian suite (DESIGN.md "Disk"). The parts
 * live beside this module; it is the one import for the daemon, the CLI and other
 * services. The on-disk store is the source of truth: the service only adapts it to the
 * REST shapes and keeps the host path of a rootfs out of answers.
 */
import type { BootSnapshotRefT, ImageT } from '../../contract/schemas.js';
import type { Paths } from '../../config.js';
import type { ImageService } from '../contracts.js';
import { buildImageFromDir } from './build.js';
import { getImage, imageIdentity, listImages, sweepDeadStaging, type Image } from './store.js';
import { bootSnapshotsOf } from './users.js';
import { pullImage } from './oci.js';
import { importImage } from './import.js';
import { pruneBlobs, sweepTempBlobs } from './cache.js';
import { login, logout } from './logins.js';
import { DEFAULT_CACHE_TTL_S, expireCacheImages, removeImageAndPools, SWEEP_MS } from './expiry.js';
import type { ImageProgress } from '../contracts.js';
import type {
  CaptureBootSnapshotT,
  ImportImageT,
  LoginT,
  PruneResultT,
  PullImageT,
} from '../../contract/schemas.js';
import { ForkdError } from '../../errors.js';
import { eagerBootSnapshot, ready, type Prepared, type Say } from '../snapshots/boot-eager.js';

export {
  validateImageName,
  imageFiles,
  getImage,
  imageIdentity,
  imageEnv,
  imageExecDefaults,
  type ExecDefaults,
  listImages,
  removeImage,
  type Image,
  type ImageFiles,
  type ImageConfig,
  type ImageManifest,
  type ImageSource,
} from './store.js';
export { buildImageFromDir, defaultSizeMiB, type BuildOptions, type Progress } from './build.js';
export {
  buildBusyboxImage,
  hostBusybox,
  isStaticElf,
  DEFAULT_IMAGE,
  HOST_BUSYBOX,
} from './busybox.js';
export { buildDebianImage, type DebianOptions } from './debian.js';
export { findAptMirror } from './apt-sources.js';
export { pullImage, type PullProgress } from './oci.js';
export { importImage } from './import.js';
export { pruneBlobs } from './cache.js';
export { login, logout } from './logins.js';
export { DEFAULT_CACHE_TTL_S } from './expiry.js';

function toWire(image: Image): ImageT {
  const { name, format, size_bytes, disk_bytes, created_at, source, config } = image;
  const wire: ImageT = { name, format, size_bytes, disk_bytes, created_at, source: { ...source } };
  if (config) wire.config = config;
  if (image.cache) wire.cache = true;
  return wire;
}

/** An image's boot snapshots, and whether each matches the image as it is now. */
async function bootSnapshotRefs(p: Paths, image: Image): Promise<BootSnapshotRefT[]> {
  const boots = await bootSnapshotsOf(p, image.name);
  if (boots.length === 0) return [];
  const identity = await imageIdentity(p, image.name).catch(() => undefined);
  return boots.map((m) => ({
    tag: m.tag,
    memory_mib: m.memory_mib,
    cpus: m.cpus,
    network: m.network ?? 'none',
    physical_bytes: Object.values(m.files).reduce((a, f) => a + f.allocated, 0),
    current: m.boot?.image_id === identity,
  }));
}

/** The wire form with the image's boot snapshots (`forkd images`, `image info`). */
async function withBoots(p: Paths, image: Image): Promise<ImageT> {
  const wire = toWire(image);
  const boots = await bootSnapshotRefs(p, image);
  if (boots.length > 0) wire.boot_snapshots = boots;
  return wire;
}

/**
 * How the daemon captures an image's boot snapshot (services/snapshots/boot-start.ts),
 * given to the image store so a build, pull or import can capture it eagerly.
 */
export type BootCapturer = (
  image: string,
  size: Omit<CaptureBootSnapshotT, 'stream'>,
  onProgress?: (message: string) => void,
) => Promise<Prepared>;

/** How the daemon keeps its cache images (expiry.ts). */
export interface ImageCacheOptions {
  /** Unused this long, a cache image goes (default DEFAULT_CACHE_TTL_S). */
  ttlS?: number;
  /** End the pre-started VMs of boot snapshots removed with an image. */
  dropPools(tags: string[]): Promise<void>;
  /** Where a sweep that failed is told. */
  warn(msg: string): void;
}

export class ImageManager implements ImageService {
  private sweep: NodeJS.Timeout | undefined;

  constructor(
    private readonly paths: Paths,
    private readonly capture?: BootCapturer,
    private readonly cache?: ImageCacheOptions,
  ) {}

  /**
   * The image just made, with its boot snapshot captured (unless `wanted` is false): a
   * capture that fails is a warning on the answer (boot-eager.ts).
   */
  private async made(
    image: Image,
    wanted: boolean | undefined,
    onProgress?: (e: ImageProgress) => void,
  ): Promise<ImageT> {
    let warnings: string[] = [];
    const capture = this.capture;
    if (wanted !== false && capture) {
      const say = (message: string) => onProgress?.({ message });
      const prepare = async (p: Say) => ready(await capture(image.name, {}, p));
      warnings = await eagerBootSnapshot(image.name, prepare, say);
    }
    const wire = await withBoots(this.paths, image);
    if (warnings.length > 0) wire.warnings = warnings;
    return wire;
  }

  async captureBootSnapshot(
    name: string,
    req: Omit<CaptureBootSnapshotT, 'stream'>,
    onProgress?: (e: ImageProgress) => void,
  ): Promise<ImageT> {
    const image = await getImage(this.paths, name);
    if (!this.capture) {
      throw new ForkdError('internal', 'this daemon captures no boot snapshots');
    }
    await this.capture(name, req, (message) => onProgress?.({ message }));
    return withBoots(this.paths, image);
  }

  /**
   * Sweep what a pull or build cut off by a crash left: temp blobs, staging dirs; then
   * expire cache images now and every few minutes. Call once before serving.
   */
  async start(): Promise<void> {
    await sweepTempBlobs(this.paths);
    await sweepDeadStaging(this.paths);
    const cache = this.cache;
    if (!cache) return;
    const ttlMs = (cache.ttlS ?? DEFAULT_CACHE_TTL_S) * 1000;
    const expire = () =>
      void this.expire(ttlMs).catch((e: unknown) =>
        cache.warn(`could not remove expired cache images: ${String(e)}`),
      );
    expire();
    this.sweep = setInterval(expire, Math.min(SWEEP_MS, Math.max(ttlMs, 1000)));
    this.sweep.unref();
  }

  close(): void {
    clearInterval(this.sweep);
  }

  private expire(ttlMs: number): Promise<string[]> {
    return expireCacheImages(this.paths, ttlMs, (tags) => this.dropPools(tags));
  }

  private dropPools(tags: string[]): Promise<void> {
    return this.cache ? this.cache.dropPools(tags) : Promise.resolve();
  }

  async list(): Promise<ImageT[]> {
    const images = await listImages(this.paths);
    return Promise.all(images.map((i) => withBoots(this.paths, i)));
  }

  async create(req: {
    name: string;
    from_dir: string;
    size_mib?: number;
    force?: boolean;
    boot_snapshot?: boolean;
    cache?: boolean;
  }): Promise<ImageT> {
    const image = await buildImageFromDir(this.paths, {
      name: req.name,
      dir: req.from_dir,
      sizeMiB: req.size_mib,
      force: req.force,
      cache: req.cache,
    });
    return this.made(image, req.boot_snapshot);
  }

  /** Running sandboxes keep working: QEMU holds the rootfs open and reads it past unlink. */
  async remove(name: string): Promise<void> {
    await removeImageAndPools(this.paths, name, (tags) => this.dropPools(tags));
  }

  async get(name: string): Promise<ImageT> {
    return withBoots(this.paths, await getImage(this.paths, name));
  }

  async pull(
    req: Omit<PullImageT, 'stream'>,
    onProgress?: (e: ImageProgress) => void,
    signal?: AbortSignal,
  ): Promise<ImageT> {
    const opts = { reference: req.reference, name: req.name, platform: req.platform };
    const build = { sizeMiB: req.size_mib, force: req.force, signal };
    const image = await pullImage(this.paths, { ...opts, ...build }, onProgress);
    return this.made(image, req.boot_snapshot, onProgress);
  }

  async import(
    req: Omit<ImportImageT, 'stream'>,
    onProgress?: (e: ImageProgress) => void,
  ): Promise<ImageT> {
    const { path, ref, name, platform, size_mib: sizeMiB, force } = req;
    const opts = { path, ref, name, platform, sizeMiB, force };
    return this.made(
      await importImage(this.paths, opts, onProgress),
      req.boot_snapshot,
      onProgress,
    );
  }

  /** Cache images no sandbox or snapshot uses now, then the layers no image names. */
  async prune(): Promise<PruneResultT> {
    const images = await this.expire(0);
    return { ...(await pruneBlobs(this.paths)), images };
  }

  async login(req: LoginT): Promise<void> {
    await login(this.paths, req.registry, { username: req.username, password: req.password });
  }

  async logout(registry: string): Promise<void> {
    await logout(this.paths, registry);
  }
}
