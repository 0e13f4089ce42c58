/**
 * The daemon's images: list, get, build from a directory on the daemon's host, pull from a
 * registry, import an archive, prune the layer cache, remove; and registry logins.
 */
import type { CallOptions } from './client.js';
import { errorFromResponse, InternalError } from './errors.js';
import type { Transport } from './http.js';
import { ndjson } from './ndjson.js';
import type { ImageInfo, ImageProgress } from './types.js';
import { compact, imageFromWire, type ImageEvent } from './wire.js';

/**
 * What to build an image from.
 *
 * @example
 * const opts: ImageCreateOptions = { name: 'tools', fromDir: '/srv/rootfs', sizeMib: 512 };
 */
export interface ImageCreateOptions extends CallOptions {
  /** a-z, 0-9, `.`, `_`, `-`. */
  name: string;
  /** An absolute directory on the daemon's host. */
  fromDir: string;
  /** Filesystem size; default: what the content needs plus headroom. */
  sizeMib?: number;
  /** Replace an image of that name. */
  force?: boolean;
  /**
   * Capture its boot snapshot for the default size once it is made (default true); one that
   * fails comes back in `warnings` and its first start captures one.
   */
  bootSnapshot?: boolean;
  /**
   * A cache entry: the daemon removes it (and its boot snapshots) once nothing has used it
   * for its image cache time, and `prune` once unused. What the containerd shim makes.
   */
  cache?: boolean;
}

/**
 * What to pull, and what to call it.
 *
 * @example
 * const opts: ImagePullOptions = { reference: '127.0.0.1:5000/app:1', name: 'app' };
 */
export interface ImagePullOptions extends CallOptions {
  /** `REGISTRY/REPOSITORY[:TAG][@DIGEST]`. */
  reference: string;
  /** Default: the repository's last component. */
  name?: string;
  /** `os/arch[/variant]` of a multi-platform image; default `linux/amd64`. */
  platform?: string;
  sizeMib?: number;
  /** Rebuild even when the image already has this digest. */
  force?: boolean;
  /** As for `create`: capture its boot snapshot once it is made (default true). */
  bootSnapshot?: boolean;
  /** Progress events as the daemon reports them (the pull then streams). */
  onProgress?(e: ImageProgress): void;
}

/**
 * An archive on the daemon's host to import.
 *
 * @example
 * const opts: ImageImportOptions = { path: '/srv/app.tar', name: 'app' };
 */
export interface ImageImportOptions extends Omit<ImagePullOptions, 'reference'> {
  /** An OCI layout directory, or a tar (OCI layout or `docker save`). */
  path: string;
  /** Which image of a multi-image archive (a tag). */
  ref?: string;
}

/**
 * The size of a boot snapshot to capture (absent: a sandbox's defaults).
 *
 * @example
 * const opts: BootSnapshotOptions = { memoryMib: 512, cpus: 2, network: 'none' };
 */
export interface BootSnapshotOptions extends CallOptions {
  memoryMib?: number;
  cpus?: number;
  network?: 'none' | 'nat';
  /** Progress events (booting, capturing) as the daemon reports them. */
  onProgress?(e: ImageProgress): void;
}

/**
 * The images of one daemon (`forkd.images`).
 *
 * @example
 * const forkd = new Forkd();
 * await forkd.images.create({ name: 'tools', fromDir: '/srv/rootfs' });
 */
export class Images {
  constructor(private readonly transport: Transport) {}

  /**
   * Every image, by name.
   *
   * @example
   * const names = (await forkd.images.list()).map((i) => i.name);
   */
  async list(opts: CallOptions = {}): Promise<ImageInfo[]> {
    const wire = await this.transport.json<{ images: unknown[] }>({
      method: 'GET',
      path: '/v1/images',
      signal: opts.signal,
    });
    return wire.images.map((i) => imageFromWire(i));
  }

  /**
   * One image with its config; throws ImageNotFoundError when there is none of that name.
   *
   * @example
   * const { config } = await forkd.images.get('app');
   */
  async get(name: string, opts: CallOptions = {}): Promise<ImageInfo> {
    const wire = await this.transport.json({
      method: 'GET',
      path: `/v1/images/${encodeURIComponent(name)}`,
      signal: opts.signal,
    });
    return imageFromWire(wire);
  }

  /**
   * Build an image from a directory on the daemon's host.
   *
   * @example
   * const image = await forkd.images.create({ name: 'tools', fromDir: '/srv/rootfs' });
   */
  async create(opts: ImageCreateOptions): Promise<ImageInfo> {
    const wire = await this.transport.json({
      method: 'POST',
      path: '/v1/images',
      json: compact({
        name: opts.name,
        from_dir: opts.fromDir,
        size_mib: opts.sizeMib,
        force: opts.force,
        boot_snapshot: opts.bootSnapshot,
        cache: opts.cache,
      }),
      signal: opts.signal,
    });
    return imageFromWire(wire);
  }

  /**
   * Pull an OCI/Docker image from a registry into an image (cached by digest: pulling the
   * same digest again answers the image as it is).
   *
   * @example
   * const image = await forkd.images.pull({
   *   reference: '127.0.0.1:5000/app:1',
   *   onProgress: (e) => console.error(e.message),
   * });
   */
  async pull(opts: ImagePullOptions): Promise<ImageInfo> {
    const body = compact({
      reference: opts.reference,
      name: opts.name,
      platform: opts.platform,
      size_mib: opts.sizeMib,
      force: opts.force,
      boot_snapshot: opts.bootSnapshot,
    });
    return this.build('/v1/images/pull', body, opts);
  }

  /**
   * Import an OCI layout (directory or tar) or a `docker save` archive from the daemon's host.
   *
   * @example
   * const image = await forkd.images.import({ path: '/srv/app.tar', name: 'app' });
   */
  async import(opts: ImageImportOptions): Promise<ImageInfo> {
    const body = compact({
      path: opts.path,
      ref: opts.ref,
      name: opts.name,
      platform: opts.platform,
      size_mib: opts.sizeMib,
      force: opts.force,
      boot_snapshot: opts.bootSnapshot,
    });
    return this.build('/v1/images/import', body, opts);
  }

  /**
   * Capture the image's boot snapshot of a size now (default: a sandbox's default size and
   * network), so no start of that size boots a kernel; answers the image with its boot
   * snapshots. `forkd image build` calls it when a daemon runs.
   *
   * @example
   * const image = await forkd.images.captureBootSnapshot('app', { memoryMib: 512 });
   * console.log(image.bootSnapshots?.map((b) => b.tag));
   */
  async captureBootSnapshot(name: string, opts: BootSnapshotOptions = {}): Promise<ImageInfo> {
    const body = compact({ memory_mib: opts.memoryMib, cpus: opts.cpus, network: opts.network });
    return this.build(`/v1/images/${encodeURIComponent(name)}/boot-snapshot`, body, opts);
  }

  /**
   * Remove cached layers no image uses.
   *
   * @example
   * const { blobs, bytes, images } = await forkd.images.prune();
   */
  async prune(opts: CallOptions = {}): Promise<{ blobs: number; bytes: number; images: string[] }> {
    return this.transport.json({ method: 'POST', path: '/v1/images/prune', signal: opts.signal });
  }

  /**
   * Check credentials against a registry and keep them in the daemon for pulls.
   *
   * @example
   * await forkd.images.login({ registry: '127.0.0.1:5000', username: 'ci', password: 'secret' });
   */
  async login(
    opts: CallOptions & { registry: string; username: string; password: string },
  ): Promise<void> {
    const { registry, username, password } = opts;
    await this.transport.bytes({
      method: 'POST',
      path: '/v1/logins',
      json: { registry, username, password },
      signal: opts.signal,
    });
  }

  /**
   * Forget a registry's credentials.
   *
   * @example
   * await forkd.images.logout('127.0.0.1:5000');
   */
  async logout(registry: string, opts: CallOptions = {}): Promise<void> {
    await this.transport.bytes({
      method: 'DELETE',
      path: `/v1/logins/${encodeURIComponent(registry)}`,
      signal: opts.signal,
    });
  }

  /**
   * Remove an image; throws ImageNotFoundError when there is none of that name.
   *
   * @example
   * await forkd.images.remove('tools');
   */
  async remove(name: string, opts: CallOptions = {}): Promise<void> {
    await this.transport.bytes({
      method: 'DELETE',
      path: `/v1/images/${encodeURIComponent(name)}`,
      signal: opts.signal,
    });
  }

  /** A pull or import: buffered, or streamed when the caller wants progress. */
  private async build(
    path: string,
    body: Record<string, unknown>,
    opts: CallOptions & { onProgress?(e: ImageProgress): void },
  ): Promise<ImageInfo> {
    if (!opts.onProgress) {
      return imageFromWire(
        await this.transport.json({ method: 'POST', path, json: body, signal: opts.signal }),
      );
    }
    const res = await this.transport.send({
      method: 'POST',
      path,
      json: { ...body, stream: true },
      signal: opts.signal,
    });
    for await (const ev of ndjson<ImageEvent>(this.transport.body(res, opts.signal))) {
      if (ev.type === 'progress') {
        const { message, layer, current, total } = ev;
        opts.onProgress({ message, layer, current, total });
      } else if (ev.type === 'done') return imageFromWire(ev.image);
      else if (ev.type === 'error') throw errorFromResponse(500, { error: ev.error });
    }
    throw new InternalError(`the ${path} request ended without its outcome; see \`forkd images\``);
  }
}
