/**
 * Snapshots by OCI reference (docs/packs.md "Fork by reference"): `ensure(REF)` answers
 * the local tag of the snapshot REF names, pulling it first when this node lacks it. The
 * pulled chain is named by content (`ref-<identity prefix>`, or a local snapshot of the
 * same content reused) and recorded in the node cache by manifest digest, so every
 * reference to the same content shares it. Concurrent calls for one reference wait on one pull. A reference
 * this node has pulled before is used as it is (like a kubelet's IfNotPresent): only a
 * `prefetch` asks the registry again whether the tag moved. Eviction (`trim`) removes
 * least-recently-used chunks and cached snapshots until the cache fits its limit; a
 * snapshot a sandbox runs from or another is built on is refused by the removal and kept.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import type { UnpackResultT } from '../../contract/schemas.js';
import { formatReference, parseReference } from '../../drivers/registry/index.js';
import { isForkdError } from '../../errors.js';
import type { SnapshotManager } from '../snapshots/service.js';
import type { CacheEntry, CachedRef, NodeCache } from './cache.js';

/** What ensure answers: the local tag, and whether this call pulled it. */
export interface Ensured {
  tag: string;
  digest: string;
  pulled: boolean;
  result?: UnpackResultT;
}

export interface ReferenceDeps {
  paths: Paths;
  cache: NodeCache;
  snapshots: SnapshotManager;
  /** The manifest digest REF names now (a registry round trip). */
  resolve(reference: string, signal?: AbortSignal): Promise<string>;
  /** Pull REF@DIGEST, its snapshots named by content (install.ts `byContent`). */
  pull(reference: string, signal?: AbortSignal): Promise<UnpackResultT>;
  /** The cache's size limit in bytes (Infinity: none). */
  limit(): number;
}

/** Whether a fork's `snapshot` names an OCI reference rather than a local tag. */
export function isReference(s: string): boolean {
  return s.includes('/');
}

export const refTag = (digest: string) =>
  `ref-${digest.slice('sha256:'.length, 'sha256:'.length + 16)}`;

export class ReferenceSnapshots {
  private readonly inflight = new Map<string, Promise<Ensured>>();

  constructor(private readonly deps: ReferenceDeps) {}

  /** The local tag of REF's snapshot, pulled first when missing (one pull per reference at a time). */
  ensure(
    reference: string,
    opts: { refresh?: boolean; signal?: AbortSignal } = {},
  ): Promise<Ensured> {
    const key = canonical(reference);
    const running = this.inflight.get(key);
    if (running) return running.then((e) => ({ ...e, pulled: false }));
    const p = this.ensuring(key, opts).finally(() => this.inflight.delete(key));
    this.inflight.set(key, p);
    return p;
  }

  private async ensuring(
    reference: string,
    opts: { refresh?: boolean; signal?: AbortSignal },
  ): Promise<Ensured> {
    const refs = await this.deps.cache.refs();
    const installed = (r: CachedRef | undefined) =>
      r && this.deps.snapshots.registry.isPublished(r.tag) ? r : undefined;
    const pinned = parseReference(reference).digest;
    let hit = installed(
      Object.values(refs).find((r) => (pinned ? r.digest === pinned : r.reference === reference)),
    );
    let digest = hit?.digest;
    if (!hit || opts.refresh) {
      digest = pinned ?? (await this.deps.resolve(reference, opts.signal));
      hit = installed(refs[digest]);
    }
    const d = digest as string;
    if (hit) {
      await this.touch(d, reference);
      return { tag: hit.tag, digest: d, pulled: false };
    }
    const result = await this.deps.pull(`${strip(reference)}@${d}`, opts.signal);
    const tag = result.tag;
    const now = new Date().toISOString();
    const all = await this.deps.cache.refs();
    all[d] = { tag, reference, digest: d, pulled_at: now, used_at: now };
    await this.deps.cache.saveRefs(all);
    await this.trim().catch(() => undefined);
    return { tag, digest: d, pulled: true, result };
  }

  /** Note a use of REF's snapshot (its place in the LRU order). */
  private async touch(digest: string, reference: string): Promise<void> {
    const all = await this.deps.cache.refs();
    const r = all[digest];
    if (!r) return;
    r.used_at = new Date().toISOString();
    if (r.reference !== reference && !reference.includes('@')) r.reference = reference;
    await this.deps.cache.saveRefs(all);
  }

  /** Everything in the cache, least recently used first. */
  list(): Promise<CacheEntry[]> {
    return this.deps.cache.list((tag) => this.snapshotBytes(tag));
  }

  /**
   * Evict least-recently-used entries until the cache is within `limit` bytes (the
   * configured limit by default; 0: everything that is not in use).
   */
  async trim(limit = this.deps.limit()): Promise<{ removed: CacheEntry[]; kept: number }> {
    // One eviction at a time, and none while a pull is under way (its chunks are in use).
    if (this.inflight.size > 0 && limit > 0) return { removed: [], kept: await this.size() };
    const entries = await this.list();
    let total = entries.reduce((a, e) => a + e.bytes, 0);
    const removed: CacheEntry[] = [];
    for (const e of entries) {
      if (total <= limit) break;
      if (!(await this.evict(e))) continue;
      removed.push(e);
      total -= e.bytes;
    }
    return { removed, kept: total };
  }

  private async size(): Promise<number> {
    return (await this.list()).reduce((a, e) => a + e.bytes, 0);
  }

  /** Remove one entry; false when it is in use (a running sandbox, a snapshot built on it). */
  private async evict(e: CacheEntry): Promise<boolean> {
    if (e.kind === 'chunk') {
      await this.deps.cache.removeChunk(e.digest);
      return true;
    }
    try {
      await this.deps.snapshots.remove(e.tag as string, {});
    } catch (err) {
      if (isForkdError(err) && err.code !== 'not_found') return false;
      if (!isForkdError(err)) throw err;
    }
    const all = await this.deps.cache.refs();
    delete all[e.digest];
    await this.deps.cache.saveRefs(all);
    return true;
  }

  private async snapshotBytes(tag: string): Promise<number> {
    const m = await this.deps.snapshots.registry.manifest(tag);
    let bytes = 0;
    for (const f of Object.values(m.files)) {
      const s = await stat(join(this.deps.paths.snapshots, tag, f.name)).catch(() => undefined);
      bytes += s ? s.blocks * 512 : 0;
    }
    return bytes;
  }
}

function canonical(reference: string): string {
  return formatReference(parseReference(reference));
}

/** The reference without its digest (a pull pins the digest it resolved). */
function strip(reference: string): string {
  return formatReference({ ...parseReference(reference), digest: undefined });
}
