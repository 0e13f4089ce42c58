/**
 * Boot snapshots rebuilt in the background (docs/snapshots.md "Boot snapshots"): when an
 * image is rebuilt, re-pulled or re-imported under the same name, its old boot snapshots
 * go with the old files and their sizes are left in the new image's directory
 * (images/users.ts `rememberBootSizes`). The daemon watches the images directory (and looks
 * once at its start) and captures those sizes again for the new image, one at a time, so
 * the next start of any of them forks instead of booting. Whatever fails is logged; the
 * first start of that size captures then.
 */
import { watch, type FSWatcher } from 'node:fs';
import type { Paths } from '../../config.js';
import { makeDir } from '../../util/make-dir.js';
import { listImages } from '../images/index.js';
import { forgetWantedBootSizes, wantedBootSizes } from '../images/users.js';
import type { ServiceLog } from '../log.js';
import type { Prepared } from './boot-eager.js';
import type { BootSize } from './boot-start.js';

export interface BootRefreshOptions {
  paths: Paths;
  /** The daemon's capture (`BootStarts.prepare`). */
  prepare(image: string, size: BootSize): Promise<Prepared>;
  log: ServiceLog;
}

/** A change in the images directory is looked at after this quiet time (a build renames twice). */
const SETTLE_MS = 300;

export class BootRefresh {
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  /** The refresh under way (they run one after another). */
  private chain: Promise<void> = Promise.resolve();

  constructor(private readonly opts: BootRefreshOptions) {}

  /** Look once now, then on every change of the images directory. */
  async start(): Promise<void> {
    await makeDir(this.opts.paths.images);
    // Unref'd: a watch alone does not keep a process (a test's services) alive.
    this.watcher = watch(this.opts.paths.images, () => this.soon()).unref();
    this.watcher.on('error', (err) => this.opts.log.warn({ err }, 'images directory watch ended'));
    this.soon();
  }

  /** Stop watching; a capture under way finishes first. */
  async close(): Promise<void> {
    this.closed = true;
    this.watcher?.close();
    clearTimeout(this.timer);
    await this.chain;
  }

  private soon(): void {
    if (this.closed) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.chain = this.chain.then(() => this.refresh());
    }, SETTLE_MS).unref();
  }

  /** Capture the boot snapshots every image is waiting for. */
  private async refresh(): Promise<void> {
    const { paths, log } = this.opts;
    for (const image of await listImages(paths).catch(() => [])) {
      const sizes = await wantedBootSizes(paths, image.name).catch(() => []);
      for (const size of sizes) {
        if (this.closed) return;
        const t0 = Date.now();
        try {
          const b = await this.opts.prepare(image.name, size);
          log.info(
            { image: image.name, snapshot: b.tag, ...size, ms: Date.now() - t0 },
            `recaptured the boot snapshot of image ${image.name} in the background`,
          );
        } catch (err) {
          log.warn(
            { image: image.name, ...size, err },
            `no boot snapshot of the rebuilt image ${image.name}: its first start captures one`,
          );
        }
      }
      if (sizes.length > 0) await forgetWantedBootSizes(paths, image.name);
    }
  }
}
