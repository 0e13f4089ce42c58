/**
 * The snapshot service: create (boot, warm, capture), the registry (list, info, verify,
 * remove), the VMM pool per snapshot, and fork — N sandboxes restored from one snapshot,
 * each mapping its memory copy-on-write. Sandboxes it forks are handed to the sandbox
 * service, which owns them from then on (timeouts, exec, kill, crash recovery).
 */
import { rm } from 'node:fs/promises';
import { basename } from 'node:path';
import type {
  BranchModeT,
  BranchRequestT,
  BranchResultT,
  CreateSnapshotT,
  LineageT,
  ForkResultT,
  PoolStateT,
  SnapshotT,
  VerifyResultT,
} from '../../contract/schemas.js';
import { FORK_MAX, POOL_MAX } from '../../contract/rules.js';
import type { Paths } from '../../config.js';
import type { RamRegion } from '../../drivers/qemu/capture.js';
import type { Vm } from '../../drivers/qemu/vm.js';
import { ForkdError } from '../../errors.js';
import type { Store } from '../../store/db.js';
import { checkRange } from '../checks.js';
import type { Caller, ForkRequest, SnapshotService } from '../contracts.js';
import type { SandboxManager } from '../sandboxes/service.js';
import { silentLog, type ServiceLog } from '../sandboxes/log.js';
import {
  abandonBranch,
  captureBranch,
  kernelVersion,
  repairBacking,
  type BranchCapture,
} from './branch.js';
import { flattenInto } from './compact.js';
import { createSnapshot } from './create.js';
import {
  publishSnapshot,
  readManifest,
  snapshotDir,
  stagingDir,
  sweepStaging,
  unbootableReason,
  validateTag,
  verifySnapshot,
  type SnapshotManifest,
} from './files.js';
import { discardChild, prepareChild, prewarmChild, restoreChild } from './fork.js';
import { Pool } from './pool.js';
import { probeLive, type LiveProbe } from '../../drivers/qemu/live.js';

export interface SnapshotServiceOptions {
  paths: Paths;
  store: Store;
  sandboxes: SandboxManager;
  qemuVersion: () => Promise<string>;
  log?: ServiceLog;
  /** Snapshot creations and branches at once (default 2); past it `capacity`. */
  maxCreating?: number;
  /**
   * The mode of a branch that names none: `auto` (default) is `live` where this host can
   * (the probe `forkd doctor` shows), `copy` elsewhere.
   */
  branchMode?: BranchModeT | 'auto';
  /** Runs while a branch's source is stopped, after the copy (tests compare RAM there). */
  whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void>;
}

export class SnapshotManager implements SnapshotService {
  readonly pool: Pool;
  /** Tags being written (create, branch, compact): a second one of them is name_taken. */
  private readonly creating = new Set<string>();
  /** What a `no_wait` branch answered, shown by get() until it is ready or failed. */
  private readonly pending = new Map<string, SnapshotT>();
  private readonly failed = new Map<string, string>();
  private readonly log: ServiceLog;
  private liveProbe: Promise<LiveProbe> | undefined;

  constructor(private readonly opts: SnapshotServiceOptions) {
    this.log = opts.log ?? silentLog;
    this.pool = new Pool(
      async (tag, prewarm) => {
        const child = await prepareChild(opts.paths, await this.bootable(tag));
        return prewarm ? prewarmChild(child) : child;
      },
      discardChild,
      this.log,
    );
  }

  private get rows() {
    return this.opts.store.snapshots;
  }

  /**
   * Remove what a crash mid-create left (rows still `writing`, staging dirs) and refill the
   * pools the store remembers. Call once before serving.
   */
  async start(): Promise<void> {
    for (const row of this.rows.list('writing')) {
      this.log.warn({ snapshot: row.tag }, 'removing a snapshot whose creation was interrupted');
      this.rows.delete(row.tag);
    }
    await sweepStaging(this.opts.paths);
    await this.repairInterruptedBranches();
    for (const row of this.rows.list('ready')) {
      if (row.pool_size > 0) void this.pool.setSize(row.tag, row.pool_size, row.pool_prewarm === 1);
    }
  }

  async create(
    req: CreateSnapshotT,
    caller: Caller,
    onProgress?: (m: string) => void,
    signal?: AbortSignal,
  ): Promise<SnapshotT> {
    this.reserve(req.tag, null);
    try {
      const { manifest, parent } = await createSnapshot(req, {
        paths: this.opts.paths,
        qemuVersion: await this.opts.qemuVersion(),
        onProgress: onProgress ?? (() => undefined),
        signal,
      });
      this.rows.update(req.tag, { state: 'ready', size_bytes: physicalBytes(manifest) });
      this.log.info({ snapshot: req.tag, parent, principal: caller.principal }, 'snapshot created');
      return this.toWire(manifest);
    } catch (e) {
      this.rows.delete(req.tag);
      throw e;
    } finally {
      this.creating.delete(req.tag);
    }
  }

  async list(): Promise<SnapshotT[]> {
    const all = await this.manifests(); // read once: every snapshot's chain is drawn from it
    const out: SnapshotT[] = [];
    for (const m of all.values()) out.push(await this.toWire(m, all));
    return out;
  }

  async get(tag: string): Promise<SnapshotT> {
    const pending = this.pending.get(tag);
    const state = this.rows.get(tag)?.state;
    if (pending && (state === 'writing' || state === 'failed')) {
      const reason = this.failed.get(tag);
      return { ...pending, state, ...(reason ? { reason } : {}) };
    }
    return this.toWire(await this.manifest(tag));
  }

  async verify(tag: string): Promise<VerifyResultT> {
    const problems = await verifySnapshot(this.opts.paths, await this.manifest(tag));
    return { ok: problems.length === 0, problems };
  }

  async remove(tag: string, opts: { force?: boolean; cascade?: boolean }): Promise<void> {
    await this.manifest(tag);
    const below = descendants(tag, await this.manifests());
    const subtree = opts.cascade ? [...below, tag] : [tag];
    const dependents = opts.cascade ? [] : below;
    if (dependents.length > 0) {
      throw new ForkdError(
        'snapshot_in_use',
        `snapshots are built on "${tag}": ${dependents.join(', ')}; remove them first or use --cascade`,
        { tag, snapshots: dependents },
      );
    }
    const children = subtree.flatMap((t) => this.opts.sandboxes.childrenOf(t));
    if (children.length > 0 && !opts.force) {
      throw new ForkdError(
        'snapshot_in_use',
        `snapshot "${tag}" has ${children.length} running sandbox(es): ${children.join(', ')}; kill them or use --force`,
        { tag, sandboxes: children },
      );
    }
    await Promise.all(children.map((id) => this.opts.sandboxes.kill(id)));
    for (const t of subtree) await this.delete(t); // deepest first: never a dangling chain
  }

  private async delete(tag: string): Promise<void> {
    await this.pool.drop(tag);
    this.rows.delete(tag);
    await rm(snapshotDir(this.opts.paths, tag), { recursive: true, force: true });
  }

  /**
   * Capture a running sandbox into a new snapshot; it keeps running. With `no_wait` the
   * answer comes once the source resumed and the snapshot is `writing` until checksummed.
   */
  async branch(id: string, req: BranchRequestT, caller: Caller): Promise<BranchResultT> {
    const tag = req.tag ?? `${id}.${Date.now().toString(36)}`;
    validateTag(tag);
    if (req.fork !== undefined) checkRange('fork', req.fork, { min: 0, max: FORK_MAX });
    const vm = this.opts.sandboxes.vmOf(id);
    const source = await this.opts.sandboxes.get(id);
    // The frozen layer is built on the snapshot the sandbox's disk layers on: its parent.
    const parent = this.opts.sandboxes.diskBaseOf(id);
    const mode = req.mode ?? (await this.defaultBranchMode());
    if (mode === 'live') await this.requireLive();
    this.reserve(tag, id);
    let captured: BranchCapture | undefined;
    try {
      const warn = (err: unknown) =>
        this.log.warn({ sandbox: id, snapshot: tag, err }, 'could not repair the disk chain');
      captured = await captureBranch(this.opts.paths, vm, tag, {
        mode,
        whileStopped: this.opts.whileStopped,
        warn,
      });
      const { capture } = captured;
      const meta = {
        tag,
        image: source.image,
        parent,
        source_sandbox: id,
        kernel: await kernelVersion(this.opts.paths),
        qemu: await this.opts.qemuVersion(),
        accel: vm.spec.accel,
        memory_mib: source.memory_mib,
        cpus: source.cpus,
        created_at: new Date().toISOString(),
        labels: req.labels ?? {},
      };
      // Once published, the source's disk layers on the new snapshot (it depends on it).
      const staging = captured.staging;
      const published = this.publish(tag, staging, meta, capture.pages).then(
        (m) => {
          this.opts.sandboxes.setDiskBase(id, tag);
          return m;
        },
        async (e: unknown) => {
          await abandonBranch(this.opts.paths, vm, tag, staging, warn);
          throw e;
        },
      );
      const answer = async (wait: boolean) => {
        const pages = wait ? await capture.pages : undefined;
        const result = {
          mode,
          pause_ms: capture.pauseMs,
          captured_bytes: pages?.bytes ?? 0,
          timings: pages ? { ...capture.timings, copy_ms: pages.ms } : capture.timings,
        };
        this.log.info(
          { snapshot: tag, sandbox: id, ...result, principal: caller.principal },
          'sandbox branched',
        );
        return result;
      };
      if (req.no_wait) {
        void published.catch(() => undefined);
        // A live copy is still running at resume: its size is known once it is `ready`.
        const result = await answer(mode === 'copy');
        return { snapshot: this.writing(meta, vm), ...result };
      }
      const snapshot = await this.toWire(await published);
      const result = await answer(true);
      if (!req.fork) return { snapshot, ...result };
      return {
        snapshot,
        ...result,
        children: await this.fork({ snapshot: tag, n: req.fork, labels: req.labels }, caller),
      };
    } catch (e) {
      if (!captured) this.release(tag);
      throw e;
    }
  }

  private async defaultBranchMode(): Promise<BranchModeT> {
    const mode = this.opts.branchMode ?? 'auto';
    if (mode !== 'auto') return mode;
    return (await this.probeLive()).available ? 'live' : 'copy';
  }

  /** Live branches need ptrace into QEMU: probed once (the doctor shows the same probe). */
  private probeLive(): Promise<LiveProbe> {
    this.liveProbe ??= probeLive();
    return this.liveProbe;
  }

  private async requireLive(): Promise<void> {
    const probe = await this.probeLive();
    if (!probe.available) {
      throw new ForkdError(
        'setup_required',
        `live branch is not available on this host: ${probe.reason}; use mode "copy" (\`forkd doctor\` explains)`,
        { mode: 'live' },
      );
    }
  }

  /** Checksum and publish a staged snapshot; the row says `ready`, or `failed` with why. */
  private async publish(
    tag: string,
    staging: string,
    meta: Omit<SnapshotManifest, 'files' | 'format_version'>,
    ready?: Promise<unknown>,
  ): Promise<SnapshotManifest> {
    try {
      await ready; // a live branch's memory file is complete once its copy is
      const manifest = await publishSnapshot(this.opts.paths, staging, meta);
      this.rows.update(tag, { state: 'ready', size_bytes: physicalBytes(manifest) });
      return manifest;
    } catch (e) {
      this.failed.set(tag, e instanceof Error ? e.message : String(e));
      this.rows.update(tag, { state: 'failed' });
      await rm(staging, { recursive: true, force: true });
      throw e;
    } finally {
      this.creating.delete(tag);
    }
  }

  /** Flatten a chained snapshot: its disk without parent layers (over its image), same memory. */
  async compact(tag: string, to: string, caller: Caller): Promise<SnapshotT> {
    const m = await this.bootable(tag);
    validateTag(to);
    this.reserve(to, m.source_sandbox);
    let staging: string | undefined;
    try {
      staging = await stagingDir(this.opts.paths, to);
      await flattenInto(this.opts.paths, m, staging);
      const manifest = await this.publish(to, staging, {
        ...m,
        tag: to,
        parent: null,
        created_at: new Date().toISOString(),
      });
      this.log.info({ snapshot: to, from: tag, principal: caller.principal }, 'snapshot compacted');
      return this.toWire(manifest);
    } catch (e) {
      if (staging) await rm(staging, { recursive: true, force: true });
      this.release(to);
      throw e;
    }
  }

  async lineage(tag?: string): Promise<LineageT> {
    const nodes: LineageT['nodes'] = [];
    const manifests = await this.manifests();
    const keep = tag ? new Set([tag, ...descendants(tag, manifests)]) : undefined;
    if (tag && !manifests.has(tag)) await this.manifest(tag);
    const images = new Set<string>();
    for (const m of manifests.values()) {
      if (keep && !keep.has(m.tag)) continue;
      const parent = m.parent
        ? { kind: 'snapshot' as const, id: m.parent }
        : m.image
          ? { kind: 'image' as const, id: m.image }
          : null;
      if (!m.parent && m.image) images.add(m.image);
      nodes.push({ kind: 'snapshot', id: m.tag, parent, state: 'ready', created_at: m.created_at });
    }
    for (const sb of await this.opts.sandboxes.list({})) {
      if (sb.state !== 'running' && sb.state !== 'starting') continue;
      const from = sb.snapshot;
      if (keep && !(from && keep.has(from))) continue;
      const parent = from
        ? { kind: 'snapshot' as const, id: from }
        : sb.image
          ? { kind: 'image' as const, id: sb.image }
          : null;
      if (!from && sb.image) images.add(sb.image);
      nodes.push({
        kind: 'sandbox',
        id: sb.id,
        parent,
        state: sb.state,
        created_at: sb.created_at,
      });
    }
    if (!keep) {
      for (const name of images)
        nodes.unshift({ kind: 'image', id: name, parent: null, state: 'ready', created_at: '' });
    }
    return { nodes };
  }

  async setPool(tag: string, size: number, opts: { prewarm?: boolean } = {}): Promise<PoolStateT> {
    checkRange('size', size, { min: 0, max: POOL_MAX });
    await this.bootable(tag);
    const prewarm = Boolean(opts.prewarm);
    this.rows.update(tag, { pool_size: size, pool_prewarm: prewarm ? 1 : 0 });
    await this.pool.setSize(tag, size, prewarm);
    return this.pool.state(tag);
  }

  async fork(req: ForkRequest, caller: Caller): Promise<ForkResultT> {
    checkRange('n', req.n, { min: 1, max: FORK_MAX });
    const m = await this.bootable(req.snapshot);
    const settled = await Promise.allSettled(
      Array.from({ length: req.n }, () => this.forkOne(m, req, caller)),
    );
    const result: ForkResultT = { sandboxes: [], failed: [] };
    settled.forEach((s, index) => {
      if (s.status === 'fulfilled') result.sandboxes.push(s.value);
      else result.failed.push({ index, error: errorBody(s.reason) });
    });
    if (result.failed.length > 0 && req.all_or_nothing) {
      await Promise.all(result.sandboxes.map((sb) => this.opts.sandboxes.kill(sb.id)));
      result.sandboxes = [];
    }
    return result;
  }

  private forkOne(m: SnapshotManifest, req: ForkRequest, caller: Caller) {
    const pooled = this.pool.take(m.tag);
    return this.opts.sandboxes.createForked(
      {
        id: pooled?.id,
        snapshot: m.tag,
        image: m.image,
        parent: m.source_sandbox,
        memoryMiB: m.memory_mib,
        cpus: m.cpus,
        labels: req.labels,
        env: req.env,
        timeoutS: req.timeout_s,
      },
      async ({ id, env, signal, onStarted }) => {
        const child = pooled ?? (await prepareChild(this.opts.paths, m, id));
        onStarted(child.vm);
        return restoreChild(child, { env, signal });
      },
      caller,
    );
  }

  /** See {@link repairBacking}: sources of branches a crash cut short. */
  private async repairInterruptedBranches(): Promise<void> {
    const ready = (tag: string) => this.rows.get(tag)?.state === 'ready';
    for (const sb of await this.opts.sandboxes.list({ state: 'running' })) {
      try {
        if (await repairBacking(this.opts.paths, this.opts.sandboxes.vmOf(sb.id), ready)) {
          this.log.warn({ sandbox: sb.id }, 'repaired the disk chain of an interrupted branch');
        }
      } catch (e) {
        this.log.warn({ sandbox: sb.id, err: e }, 'could not check the disk chain');
      }
    }
  }

  /** Claim a tag for a snapshot being written: its row says `writing` until published. */
  private reserve(tag: string, source: string | null): void {
    validateTag(tag);
    if (this.rows.get(tag) || this.creating.has(tag)) {
      throw new ForkdError('name_taken', `snapshot "${tag}" already exists or is being written`, {
        tag,
      });
    }
    if (this.creating.size >= (this.opts.maxCreating ?? 2)) {
      throw new ForkdError('capacity', 'too many snapshots are being written; retry shortly', {
        retry_after_s: 5,
      });
    }
    this.creating.add(tag);
    this.rows.insert({
      tag,
      state: 'writing',
      parent: null,
      source,
      dir: snapshotDir(this.opts.paths, tag),
    });
  }

  private release(tag: string): void {
    this.creating.delete(tag);
    this.rows.delete(tag);
  }

  /** The answer for a snapshot still being checksummed (`no_wait`). */
  private writing(meta: Omit<SnapshotManifest, 'files' | 'format_version'>, vm: Vm): SnapshotT {
    const wire: SnapshotT = {
      ...meta,
      state: 'writing',
      bootable: false,
      files: [],
      logical_bytes: 0,
      physical_bytes: 0,
      children_alive: 0,
      pool: { size: 0, ready: 0, prewarm: false },
      depth: 0,
      ancestors: [],
      dependents: [],
      reason: `being written from sandbox ${basename(vm.spec.dir)}`,
    };
    this.pending.set(meta.tag, wire);
    return wire;
  }

  /** Every published manifest by tag. */
  private async manifests(): Promise<Map<string, SnapshotManifest>> {
    const out = new Map<string, SnapshotManifest>();
    for (const row of this.rows.list('ready')) {
      const m = await readManifest(this.opts.paths, row.tag).catch(() => undefined);
      if (m) out.set(m.tag, m);
    }
    return out;
  }

  /** The manifest of a published snapshot (snapshot_not_found otherwise). */
  private async manifest(tag: string): Promise<SnapshotManifest> {
    validateTag(tag);
    if (this.rows.get(tag)?.state !== 'ready') {
      throw new ForkdError('snapshot_not_found', `no snapshot "${tag}": see \`forkd snapshots\``, {
        tag,
      });
    }
    return readManifest(this.opts.paths, tag);
  }

  /** The manifest of a snapshot that can be restored (snapshot_not_bootable naming why). */
  private async bootable(tag: string): Promise<SnapshotManifest> {
    const m = await this.manifest(tag);
    const reason = await unbootableReason(this.opts.paths, m);
    if (reason) {
      throw new ForkdError(
        'snapshot_not_bootable',
        `snapshot "${tag}" is not bootable: ${reason}`,
        {
          tag,
          reason,
        },
      );
    }
    return m;
  }

  /** The REST shape; `all` (every published manifest) is read here when not given. */
  private async toWire(
    m: SnapshotManifest,
    all?: Map<string, SnapshotManifest>,
  ): Promise<SnapshotT> {
    const manifests = all ?? (await this.manifests());
    const reason = await unbootableReason(this.opts.paths, m);
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
      children_alive: this.opts.sandboxes.childrenOf(m.tag).length,
      pool: this.pool.state(m.tag),
      ancestors: ancestors(m, manifests),
      dependents: descendants(m.tag, manifests).reverse(),
      depth: 0,
    };
    wire.depth = wire.ancestors.length;
    if (reason) wire.reason = reason;
    return wire;
  }
}

function physicalBytes(m: SnapshotManifest): number {
  return Object.values(m.files).reduce((a, f) => a + f.allocated, 0);
}

function errorBody(e: unknown): {
  code: string;
  message: string;
  details?: Record<string, unknown>;
} {
  if (e instanceof ForkdError) return { code: e.code, message: e.message, details: e.details };
  return { code: 'internal', message: 'the child could not be forked' };
}

/** Snapshots built on `tag`, deepest first. */
function descendants(tag: string, all: Map<string, SnapshotManifest>): string[] {
  const list = [...all.values()];
  const walk = (t: string): string[] =>
    list.filter((m) => m.parent === t).flatMap((m) => [...walk(m.tag), m.tag]);
  return walk(tag);
}

/** Parent, grandparent, … of a manifest (a parent no longer published ends the list). */
function ancestors(m: SnapshotManifest, all: Map<string, SnapshotManifest>): string[] {
  const out: string[] = [];
  let parent = m.parent;
  while (parent && !out.includes(parent)) {
    out.push(parent);
    parent = all.get(parent)?.parent ?? null;
  }
  return out;
}
