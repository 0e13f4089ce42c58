/**
 * A start from an image without a cold boot, as the daemon decides it for every caller
 * (`forkd create`, `forkd run`, the SDKs, the E2B listener, the containerd shim, builds):
 * fork the image's boot snapshot (boot.ts), capturing it first when this size was never
 * started. What cannot use one says why in the log and boots instead; `cold` boots.
 */
import type { CreateSandboxT, SandboxT } from '../../contract/schemas.js';
import type { Paths } from '../../config.js';
import type { Caller } from '../contracts.js';
import { getImage, imageEnv } from '../images/index.js';
import type { Limiter } from '../limits.js';
import type { NetworkManager } from '../network/service.js';
import type { ServiceLog } from '../log.js';
import { resolveResources } from '../sandboxes/sandbox.js';
import { DEFAULT_IMAGE } from '../images/index.js';
import {
  BOOT_TAG_PREFIX,
  bootKey,
  bootTag,
  ensureBootSnapshot,
  type BootKey,
  type BootSnapshot,
} from './boot.js';
import type { Prepared } from './boot-eager.js';
import type { SnapshotManager } from './service.js';

export interface BootStartOptions {
  paths: Paths;
  snapshots: SnapshotManager;
  qemuVersion: () => Promise<string>;
  network?: NetworkManager;
  limiter: Limiter;
  log: ServiceLog;
  /** Pre-warmed VMs kept per boot snapshot (the daemon's default pool, at most 1; 0: none). */
  pool: number;
  /** Running sandboxes forked from a snapshot (its old boot snapshots are kept while any run). */
  forkedFrom(tag: string): string[];
}

/** The size of a boot snapshot as a request names it (absent: a start's defaults). */
export type BootSize = Pick<CreateSandboxT, 'memory_mib' | 'cpus' | 'network'>;

/** Starts sandboxes from images by forking their boot snapshots. */
export class BootStarts {
  constructor(private readonly opts: BootStartOptions) {}

  /**
   * A sandbox of `req.image` forked from its boot snapshot, or undefined when there is none
   * to be had (the reason is logged; the caller boots). Errors of the request itself
   * (an unknown image, a size out of range) come back from that boot as they always did.
   */
  async start(req: CreateSandboxT, caller: Caller): Promise<SandboxT | undefined> {
    const image = req.image ?? DEFAULT_IMAGE;
    let tag: string | undefined;
    try {
      const key = await this.keyOf(req, image);
      tag = bootTag(key);
      const { manifest } = await this.ensure(key);
      const env = imageEnv(await getImage(this.opts.paths, image));
      return await this.forkOne(req, caller, manifest.tag, env);
    } catch (err) {
      this.opts.log.warn(
        { image, snapshot: tag, err },
        `no boot snapshot of image ${image} to fork (${errorText(err)}): booting it`,
      );
      return undefined;
    }
  }

  /**
   * The boot snapshot of `image` at a size (default: a start's defaults), captured now when
   * there is none (`image pull`, `image build`, the background refresh). Throws when it
   * cannot be had.
   */
  async prepare(
    image: string,
    size: BootSize = {},
    onProgress?: (message: string) => void,
  ): Promise<Prepared> {
    const key = await this.keyOf(size, image);
    const b = await this.ensure(key, onProgress);
    return { tag: b.manifest.tag, captured: b.captured, captureMs: b.captureMs, key };
  }

  /** The key's boot snapshot, found or captured (then pooled, and outdated ones removed). */
  private async ensure(key: BootKey, onProgress?: (m: string) => void): Promise<BootSnapshot> {
    const b = await ensureBootSnapshot(
      {
        paths: this.opts.paths,
        registry: this.opts.snapshots.registry,
        qemuVersion: key.qemu,
        network: this.opts.network,
        limiter: this.opts.limiter,
        onProgress,
      },
      key,
    );
    if (b.captured) await this.afterCapture(key, bootTag(key), b.captureMs);
    return b;
  }

  private async keyOf(req: BootSize, image: string): Promise<BootKey> {
    const res = resolveResources({ memoryMiB: req.memory_mib, cpus: req.cpus });
    const network = this.opts.network ? (req.network ?? 'nat') : 'none';
    const start = { image, ...res, network } as const;
    return bootKey(this.opts.paths, start, await this.opts.qemuVersion());
  }

  /**
   * The one child of a boot snapshot, with the request's labels, env, limits, policy, and
   * the caller's network namespace when it names one (a pod's).
   */
  private async forkOne(
    req: CreateSandboxT,
    caller: Caller,
    snapshot: string,
    baseEnv: Record<string, string>,
  ): Promise<SandboxT> {
    const outcome = await this.opts.snapshots.fork(
      {
        snapshot,
        n: 1,
        labels: req.labels,
        // The boot snapshot's agent has the image's Env already; pushed again all the same.
        env: { ...baseEnv, ...req.env },
        timeout_s: req.timeout_s,
        egress: req.egress,
        limits: req.limits,
        idle: req.idle,
        netns: req.netns,
        forward_ports: req.forward_ports,
      },
      caller,
      { imageStart: true },
    );
    const failed = outcome.failed[0];
    if (failed) throw failed.error;
    this.opts.log.info(
      { snapshot, sandbox: outcome.sandboxes[0]?.id },
      'forked from a boot snapshot',
    );
    return outcome.sandboxes[0] as SandboxT;
  }

  /**
   * A new boot snapshot: its pool starts filling (so the next start is a resume), and the
   * image's boot snapshots of the same size that no longer match go (unless a sandbox
   * forked from one still runs).
   */
  private async afterCapture(key: BootKey, tag: string, ms: number): Promise<void> {
    this.opts.log.info(
      { image: key.image, snapshot: tag, memory_mib: key.memory_mib, cpus: key.cpus, ms },
      `captured the boot snapshot of image ${key.image}`,
    );
    if (this.opts.pool > 0) {
      await this.opts.snapshots.setPool(tag, this.opts.pool, { prewarm: true });
    }
    const { registry, pool } = this.opts.snapshots;
    // An image removed or rebuilt took its boot snapshots' files along (images/users.ts).
    for (const gone of pool.tags().filter((t) => isBootTag(t) && !registry.isPublished(t))) {
      await pool.drop(gone);
    }
    for (const old of (await registry.manifests()).values()) {
      const stale =
        old.tag !== tag &&
        isBootTag(old.tag) &&
        old.boot?.image === key.image &&
        old.boot.image_id !== key.image_id;
      if (!stale || this.opts.forkedFrom(old.tag).length > 0) continue;
      await this.opts.snapshots
        .remove(old.tag, {})
        .catch((err: unknown) =>
          this.opts.log.warn(
            { snapshot: old.tag, err },
            'could not remove an outdated boot snapshot',
          ),
        );
    }
  }
}

function isBootTag(tag: string): boolean {
  return tag.startsWith(BOOT_TAG_PREFIX);
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
