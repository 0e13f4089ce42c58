/**
 * What a branch needs of the snapshots (the seam between branch/ and snapshots/): claim a
 * tag, describe the snapshot while it is written, publish its staged files, show it, and
 * fork its children. Branch holds this, never the snapshot manager or its registry.
 */
import type { SnapshotT } from '../../contract/schemas.js';
import type { Caller, ForkOutcome, ForkRequest } from '../contracts.js';
import type { SnapshotManifest } from './files.js';
import type { SnapshotMeta } from './registry.js';
import type { SnapshotManager } from './service.js';

export interface SnapshotPublishing {
  isPublished(tag: string): boolean;
  /** Claim a tag for a snapshot being written (`writing` until published). */
  reserve(tag: string, source: string | null): void;
  /** Give up a claimed tag that was never published. */
  release(tag: string): Promise<void>;
  /** Record what is being written, shown (with its reason) should it fail. */
  describe(meta: SnapshotMeta): void;
  /** The answer for a snapshot still being checksummed (`no_wait`). */
  writing(meta: SnapshotMeta, sourceDir: string): SnapshotT;
  manifest(tag: string): Promise<SnapshotManifest>;
  /**
   * Publish staged files under their tag once `ready` settles (a live copy's pages); its
   * memory chain is settled after (kept or flattened).
   */
  publish(
    tag: string,
    staging: string,
    meta: SnapshotMeta,
    opts: { ready?: Promise<unknown>; keepFailed?: boolean },
  ): Promise<SnapshotManifest>;
  toWire(m: SnapshotManifest): Promise<SnapshotT>;
  fork(req: ForkRequest, caller: Caller): Promise<ForkOutcome>;
}

/** The snapshot manager as a branch sees it. */
export function publishingOf(snapshots: SnapshotManager): SnapshotPublishing {
  const { registry } = snapshots;
  return {
    isPublished: (tag) => registry.isPublished(tag),
    reserve: (tag, source) => registry.reserve(tag, source),
    release: (tag) => registry.release(tag),
    describe: (meta) => registry.describe(meta),
    writing: (meta, dir) => registry.writing(meta, dir),
    manifest: (tag) => registry.manifest(tag),
    publish: async (tag, staging, meta, opts) => {
      const m = await registry.publish(tag, staging, meta, opts);
      snapshots.settleMemoryChain(m);
      return m;
    },
    toWire: (m) => registry.toWire(m),
    fork: (req, caller) => snapshots.fork(req, caller),
  };
}
