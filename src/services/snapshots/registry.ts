/**
 * The snapshot registry: which tags exist, in which state, and what the API shows of them.
 * A tag is reserved (`writing` row) before anything is written, published (checksummed
 * manifest, renamed into place, `ready` row) or released; the manifests on disk are the
 * truth for everything else. Shared by create, compact and branch, which all write
 * snapshots, and by fork, which restores them.
 */
import { basename } from 'node:path';
import { rm } from 'node:fs/promises';
import type { PoolStateT, SnapshotT, VerifyResultT } from '../../contract/schemas.js';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import type { Store } from '../../store/db.js';
import type { SnapshotRow } from '../../store/snapshots.js';
import { crashPoint } from '../../util/crash.js';
import type { ServiceLog } from '../log.js';
import {
  listTags,
  publishSnapshot,
  readManifest,
  snapshotDir,
  sweepStaging,
  validateTag,
  type SnapshotManifest,
} from './files.js';
import { restoreProblem, verifyChain } from './chain.js';
import { memorySizes, sweepMemory } from './memory.js';
import { ancestors, descendants } from './lineage.js';
import { readOrigin } from './origin.js';

/** A manifest before publishing: what the writer knows (the files are checksummed then). */
export type SnapshotMeta = Omit<SnapshotManifest, 'files' | 'format_version'>;

export interface RegistryOptions {
  paths: Paths;
  store: Store;
  log: ServiceLog;
  /** Snapshot writes at once (create, branch, compact; default 2); past it `capacity`. */
  maxCreating?: number;
  /**
   * A snapshot's children: the running sandboxes forked from it (SandboxHost.forkedFrom).
   * A source branched into it layers on it but is no child of it (issue 29).
   */
  forkedFrom(tag: string): string[];
  /** The VMM pool of a snapshot. */
  poolState(tag: string): Promise<PoolStateT>;
}

export class SnapshotRegistry {
  /** Tags being written: a second one of them is name_taken. */
  private readonly creating = new Set<string>();
  /** What a `no_wait` branch answered, shown by get() until it is ready or failed. */
  private readonly pending = new Map<string, SnapshotT>();

  constructor(private readonly opts: RegistryOptions) {}

  private get rows() {
    return this.opts.store.snapshots;
  }

  /**
   * Remove what a crash mid-write left: rows still `writing`, staging dirs, and snapshot
   * dirs with no `ready` row (a crash between the rename into place and the row update).
   */
  async start(): Promise<void> {
    for (const row of this.rows.list('writing')) {
      this.opts.log.warn({ snapshot: row.tag }, 'a snapshot write was interrupted');
      // A branch leaves a trace (its source may have answered `no_wait` already); a create
      // that died with its parent VM leaves nothing.
      if (row.source === null) this.rows.delete(row.tag);
      else this.rows.update(row.tag, { state: 'failed', reason: INTERRUPTED });
    }
    await sweepStaging(this.opts.paths);
    await sweepMemory(this.opts.paths);
    for (const tag of await listTags(this.opts.paths)) {
      if (this.isPublished(tag)) continue;
      this.opts.log.warn({ snapshot: tag }, 'removing the files of a snapshot never published');
      await rm(snapshotDir(this.opts.paths, tag), { recursive: true, force: true });
    }
  }

  /** Tags whose rows say `ready` with their pool settings, to refill pools at start. */
  pools(): { tag: string; size: number; prewarm: boolean }[] {
    return this.rows
      .list('ready')
      .filter((r) => r.pool_size > 0)
      .map((r) => ({ tag: r.tag, size: r.pool_size, prewarm: r.pool_prewarm === 1 }));
  }

  setPool(tag: string, size: number, prewarm: boolean): void {
    this.rows.update(tag, { pool_size: size, pool_prewarm: prewarm ? 1 : 0 });
  }

  isPublished(tag: string): boolean {
    return this.rows.get(tag)?.state === 'ready';
  }

  /** Claim a tag for a snapshot being written: its row says `writing` until published. */
  reserve(tag: string, source: string | null): void {
    validateTag(tag);
    const row = this.rows.get(tag);
    // A `writing` row no writer holds is one whose undo could not remove it (rowWrite).
    const stale = row?.state === 'writing' && !this.creating.has(tag);
    if (row?.state === 'failed') {
      throw new ForkdError(
        'name_taken',
        `snapshot "${tag}" exists, failed (${row.reason ?? 'its write failed'}): remove it with \`forkd rmi ${tag}\` or pick another tag`,
        { tag },
      );
    }
    if ((row && !stale) || this.creating.has(tag)) {
      throw new ForkdError('name_taken', `snapshot "${tag}" already exists or is being written`, {
        tag,
      });
    }
    if (this.creating.size >= (this.opts.maxCreating ?? 2)) {
      throw new ForkdError('capacity', 'too many snapshots are being written; retry shortly', {
        retry_after_s: 5,
      });
    }
    // The row first: should it fail (a full disk), no claim on the tag or the cap is left.
    if (stale) this.rows.delete(tag);
    this.rows.insert({
      tag,
      state: 'writing',
      parent: null,
      source,
      dir: snapshotDir(this.opts.paths, tag),
    });
    this.creating.add(tag);
  }

  /**
   * Give up a reserved tag that nothing was published under: the files its writer may have
   * renamed into place already go too (the row update after the rename can fail on a full
   * disk: SQLITE_FULL), then the row. Never throws: callers are undoing another failure.
   */
  async release(tag: string): Promise<void> {
    this.creating.delete(tag);
    this.pending.delete(tag);
    await rm(snapshotDir(this.opts.paths, tag), { recursive: true, force: true });
    this.rowWrite(tag, 'could not remove the row of a failed snapshot', () =>
      this.rows.delete(tag),
    );
  }

  /** A reserved tag whose files were put in place by its writer (snapshot create). */
  markReady(tag: string, manifest: SnapshotManifest): void {
    try {
      this.rows.update(tag, { state: 'ready', size_bytes: physicalBytes(manifest) });
    } finally {
      this.creating.delete(tag);
    }
  }

  /**
   * Checksum and publish a staged snapshot: the row says `ready`. On failure nothing stays
   * under the tag (the caller is told), unless `keepFailed` (a `no_wait` branch, whose caller
   * was answered already and must find out by polling): then the row says `failed` with why.
   */
  async publish(
    tag: string,
    staging: string,
    meta: SnapshotMeta,
    opts: { ready?: Promise<unknown>; keepFailed?: boolean } = {},
  ): Promise<SnapshotManifest> {
    try {
      await opts.ready; // a live branch's memory file is complete once its copy is
      const manifest = await publishSnapshot(this.opts.paths, staging, meta);
      crashPoint('publish:renamed');
      this.rows.update(tag, { state: 'ready', size_bytes: physicalBytes(manifest) });
      this.creating.delete(tag);
      this.pending.delete(tag);
      return manifest;
    } catch (e) {
      // Files first: on a full disk the row writes themselves can fail (SQLITE_FULL) until
      // the staging dir's space is given back.
      await rm(staging, { recursive: true, force: true });
      if (!opts.keepFailed) {
        await this.release(tag);
        throw e;
      }
      this.creating.delete(tag);
      this.pending.delete(tag);
      await rm(snapshotDir(this.opts.paths, tag), { recursive: true, force: true });
      const reason = e instanceof Error ? e.message : String(e);
      this.rowWrite(tag, 'could not mark a snapshot failed', () =>
        this.rows.update(tag, { state: 'failed', reason }),
      );
      throw e;
    }
  }

  /**
   * A row write while undoing a failure: should it fail too (the database is on the full
   * disk), the tag's row stays `writing` (hidden; start() settles it) and the first error,
   * the one the caller reports, is kept.
   */
  private rowWrite(tag: string, what: string, write: () => void): void {
    try {
      write();
    } catch (err) {
      this.opts.log.warn({ snapshot: tag, err }, what);
    }
  }

  /** Forget a published snapshot: its row and its files. */
  async delete(tag: string): Promise<void> {
    this.rows.delete(tag);
    await rm(snapshotDir(this.opts.paths, tag), { recursive: true, force: true });
  }

  /** Keep what a branch's manifest will say, so it can be shown even if it fails. */
  describe(meta: SnapshotMeta): void {
    this.rows.update(meta.tag, { manifest: JSON.stringify(meta) });
  }

  isFailed(tag: string): boolean {
    return this.rows.get(tag)?.state === 'failed';
  }

  /** The answer for a snapshot still being checksummed (`no_wait`). */
  writing(meta: SnapshotMeta, sourceDir: string): SnapshotT {
    const wire = unpublishedWire(
      meta,
      'writing',
      `being written from sandbox ${basename(sourceDir)}`,
    );
    this.pending.set(meta.tag, wire);
    return wire;
  }

  /** A failed snapshot as listed: what its writer described, the state, the reason. */
  private failedWire(row: SnapshotRow): SnapshotT {
    const described = JSON.parse(row.manifest) as Partial<SnapshotMeta>;
    const meta: SnapshotMeta = {
      image: null,
      parent: row.parent,
      source_sandbox: row.source,
      kernel: '',
      qemu: '',
      accel: 'tcg',
      memory_mib: 0,
      cpus: 0,
      created_at: row.created_at,
      labels: {},
      ...described,
      tag: row.tag,
    };
    return unpublishedWire(meta, 'failed', row.reason ?? 'failed');
  }

  async list(): Promise<SnapshotT[]> {
    const all = await this.manifests(); // read once: every snapshot's chain is drawn from it
    const out: SnapshotT[] = [];
    for (const m of all.values()) out.push(await this.toWire(m, all));
    for (const row of this.rows.list('failed')) out.push(this.failedWire(row));
    for (const [tag, wire] of this.pending) if (this.creating.has(tag)) out.push(wire);
    return out;
  }

  async get(tag: string): Promise<SnapshotT> {
    const pending = this.pending.get(tag);
    const row = this.rows.get(tag);
    if (row?.state === 'failed') return this.failedWire(row);
    if (pending && row?.state === 'writing' && this.creating.has(tag)) return pending;
    return this.toWire(await this.manifest(tag));
  }

  async verify(tag: string): Promise<VerifyResultT> {
    const problems = await verifyChain(this.opts.paths, await this.manifest(tag));
    return { ok: problems.length === 0, problems };
  }

  /** Every published manifest by tag. */
  async manifests(): Promise<Map<string, SnapshotManifest>> {
    const out = new Map<string, SnapshotManifest>();
    for (const row of this.rows.list('ready')) {
      const m = await readManifest(this.opts.paths, row.tag).catch(() => undefined);
      if (m) out.set(m.tag, m);
    }
    return out;
  }

  /**
   * The manifest of a published snapshot. A tag that is listed but unpublished answers
   * what it is — `snapshot_failed` with why and how to remove it, `snapshot_writing` — so
   * no verb calls a snapshot `forkd snapshots` shows missing; else `snapshot_not_found`.
   */
  async manifest(tag: string): Promise<SnapshotManifest> {
    validateTag(tag);
    const row = this.rows.get(tag);
    if (row?.state === 'failed') throw unfinished(tag, 'failed', row.reason);
    // A `writing` row no writer holds is hidden (rowWrite): not found, as before.
    if (row?.state === 'writing' && this.creating.has(tag)) throw unfinished(tag, 'writing');
    if (row?.state !== 'ready') {
      throw new ForkdError('snapshot_not_found', `no snapshot "${tag}": see \`forkd snapshots\``, {
        tag,
      });
    }
    return readManifest(this.opts.paths, tag);
  }

  /**
   * The manifest of a snapshot that can be restored: `snapshot_not_bootable` naming the
   * file of its own that is wrong, `snapshot_broken` naming the layer of its chain.
   */
  async bootable(tag: string): Promise<SnapshotManifest> {
    const m = await this.manifest(tag);
    const bad = await restoreProblem(this.opts.paths, m);
    if (bad) {
      const what = bad.code === 'snapshot_broken' ? 'is broken' : 'is not bootable';
      throw new ForkdError(bad.code, `snapshot "${tag}" ${what}: ${bad.reason}`, {
        tag,
        reason: bad.reason,
        ...(bad.file ? { layer: bad.file } : {}),
      });
    }
    return m;
  }

  /** The REST shape; `all` (every published manifest) is read here when not given. */
  async toWire(m: SnapshotManifest, all?: Map<string, SnapshotManifest>): Promise<SnapshotT> {
    const manifests = all ?? (await this.manifests());
    const reason = (await restoreProblem(this.opts.paths, m))?.reason ?? null;
    const files = Object.values(m.files);
    const wire: SnapshotT = {
      tag: m.tag,
      state: 'ready',
      bootable: reason === null,
      image: m.image,
      parent: m.parent,
      source_sandbox: m.source_sandbox,
      memory_mib: m.memory_mib,
      cpus: m.cpus,
      labels: m.labels,
      created_at: m.created_at,
      kernel: m.kernel,
      qemu: m.qemu,
      files,
      logical_bytes: files.reduce((a, f) => a + f.size, 0),
      physical_bytes: physicalBytes(m),
      children_alive: this.opts.forkedFrom(m.tag).length,
      pool: await this.opts.poolState(m.tag),
      ancestors: ancestors(m, manifests),
      dependents: descendants(m.tag, manifests).reverse(),
      depth: 0,
      memory: await memorySizes(this.opts.paths, m, manifests),
    };
    const origin = await readOrigin(this.opts.paths, m.tag);
    if (origin) wire.origin = origin;
    if (m.boot) wire.boot = m.boot;
    if (m.user) wire.user = m.user;
    if (m.workdir) wire.workdir = m.workdir;
    wire.depth = wire.ancestors.length;
    if (reason) wire.reason = reason;
    return wire;
  }
}

/**
 * What a verb given a listed but unfinished snapshot answers: `snapshot_failed` with why
 * and how to remove it, or `snapshot_writing` with how to see when it is ready.
 */
export function unfinished(tag: string, state: 'failed' | 'writing', reason?: string | null) {
  if (state === 'writing') {
    return new ForkdError(
      'snapshot_writing',
      `snapshot "${tag}" is still being written: retry once \`forkd snapshot info ${tag}\` says ready`,
      { tag, state },
    );
  }
  const why = reason ?? 'its write failed';
  return new ForkdError(
    'snapshot_failed',
    `snapshot "${tag}" failed and cannot be used: ${why}; remove it with \`forkd rmi ${tag}\``,
    { tag, state, reason: why },
  );
}

/** Why a branch cut off by a daemon stop failed (how to remove it is said where it is shown). */
const INTERRUPTED =
  'the daemon stopped before this branch was published; its source was repaired and runs on';

/** The REST shape of a snapshot with no published files (being written, or failed). */
function unpublishedWire(
  meta: SnapshotMeta,
  state: 'writing' | 'failed',
  reason: string,
): SnapshotT {
  return {
    ...meta,
    state,
    bootable: false,
    files: [],
    logical_bytes: 0,
    physical_bytes: 0,
    children_alive: 0,
    pool: { size: 0, ready: 0, prewarm: false, memory_bytes: 0 },
    depth: 0,
    ancestors: [],
    dependents: [],
    reason,
  };
}

function physicalBytes(m: SnapshotManifest): number {
  return Object.values(m.files).reduce((a, f) => a + f.allocated, 0);
}
