/** The daemon's images: list, build from a directory on the daemon's host, remove. */
import type { CallOptions } from './client.js';
import type { Transport } from './http.js';
import type { ImageInfo } from './types.js';
import { compact, fromWire, IMAGE } from './wire.js';

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
    return wire.images.map((i) => fromWire(IMAGE, i));
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
      }),
      signal: opts.signal,
    });
    return fromWire(IMAGE, wire);
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
}
