/**
 * The snapshot service: create (boot, warm, capture: create.ts), the registry (list, info,
 * verify, remove: registry.ts), compact (compact.ts), lineage (lineage.ts), the VMM pool
 * per snapshot (pool.ts) and fork (fork.ts). This class only wires them and states the
 * rules that span them; branch, which makes snapshots of running sandboxes, is its own
 * service (src/services/branch/) and uses this one's registry and fork.
 */
import { PodPolicy } from '../pod-policy.js';
import { rm } from 'node:fs/promises';
import { FORK_MAX, POOL_MAX } from '../../contract/rules.js';
import type {
  CreateSnapshotT,
  LineageT,
  PoolBudgetStateT,
  PoolStateT,
  SnapshotT,
  VerifyResultT,
} from '../../contract/schemas.js';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import type { Store } from '../../store/db.js';
import { checkRange } from '../checks.js';
import type { Caller, ForkOutcome, ForkRequest, SnapshotService } from '../contracts.js';
import type { SandboxHost } from '../sandboxes/host.js';
import { silentLog, type ServiceLog } from '../log.js';
import { flattenInto } from './compact.js';
import { createSnapshot } from './create.js';
import { stagingDir, validateTag, type SnapshotManifest } from './files.js';
import {
  checkForkNetwork,
  childLimits,
  discardChild,
  forkChildren,
  leaseNet,
  checkForkNetns,
  prepareChild,
  prewarmChild,
  type ForkOptions,
  type PreparedChild,
} from './fork.js';
import type { NetworkManager } from '../network/service.js';
import { newSandboxId } from '../sandboxes/sandbox.js';
import type { Limiter } from '../limits.js';
import { descendants, lineageOf } from './lineage.js';
import {
  compactMemory,
  evictMaterialized,
  materialize,
  memoryCacheBudget,
  memoryChainMax,
  memoryDepth,
  withoutDiff,
} from './memory.js';
import { Pool } from './pool.js';
import { PoolBudget, poolBudgetFromEnv, type PoolBudgetLimits } from './pool-budget.js';
import { SnapshotRegistry } from './registry.js';
import { unpinSources } from './unpin.js';
import { KeyedLock } from '../../util/keyed-lock.js';
import { asDiskFull, refuseWhenFull } from '../disk-full.js';

export interface SnapshotServiceOptions {
  paths: Paths;
  store: Store;
  sandboxes: SandboxHost;
  qemuVersion: () => Promise<string>;
  log?: ServiceLog;
  /** Snapshot creations and branches at once (default 2); past it `capacity`. */
  maxCreating?: number;
  /** Diffs a memory is read through before a branch is compacted (default FORKD_MEMORY_CHAIN_MAX, 16). */
  memoryChainMax?: number;
  /** Bytes of unused materialized memory kept (default FORKD_MEMORY_CACHE_MIB, 4096 MiB). */
  memoryCacheBytes?: number;
  network?: NetworkManager;
  /** The sandboxes' cgroups (the sandbox service's). */
  limiter: Limiter;
  /**
   * Pre-warmed pool size a snapshot made by `snapshot create` gets (`forkd daemon
   * --default-pool`, FORKD_DEFAULT_POOL; default 2; 0: none). Branches get none: their
   * children must start at the exact captured instant.
   */
  defaultPool?: number;
  /** Which snapshots containerd's sandboxes (pods) may fork; default: none. */
  podPolicy?: PodPolicy;
  /**
   * All pools' VMs together at most (`forkd daemon --pool-budget-vms/--pool-budget-mib`;
   * default FORKD_POOL_BUDGET_VMS/_MIB, else 8 VMs and 384 MiB; pool-budget.ts).
   */
  poolBudget?: PoolBudgetLimits;
}

/** The default pool size: FORKD_DEFAULT_POOL, else 2 (docs/snapshots.md "The VMM pool"). */
export function defaultPoolFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.FORKD_DEFAULT_POOL ?? DEFAULT_POOL);
  return Number.isInteger(n) && n >= 0 && n <= POOL_MAX ? n : DEFAULT_POOL;
}

const DEFAULT_POOL = 2;

export class SnapshotManager implements SnapshotService {
  readonly pool: Pool;
  readonly registry: SnapshotRegistry;
  private readonly log: ServiceLog;
  /** Removals one at a time (see holdDisks). */
  private readonly removals = new KeyedLock();

  constructor(private readonly opts: SnapshotServiceOptions) {
    this.log = opts.log ?? silentLog;
    this.registry = new SnapshotRegistry({
      paths: opts.paths,
      store: opts.store,
      log: this.log,
      maxCreating: opts.maxCreating,
      forkedFrom: (tag) => opts.sandboxes.forkedFrom(tag),
      poolState: (tag) => this.poolState(tag),
    });
    this.pool = new Pool(
      async (tag, prewarm) => {
        const m = await this.materialized(tag);
        const id = newSandboxId();
        try {
          const limits = await childLimits(opts.limiter, m);
          const net = await leaseNet(opts.network, m, id);
          const placement = { limiter: opts.limiter, limits };
          const child = await prepareChild(opts.paths, m, id, net, placement);
          return prewarm ? await prewarmChild(child) : child;
        } catch (e) {
          await opts.network?.release(id);
          throw e;
        }
      },
      (child: PreparedChild) => this.discard(child),
      this.log,
      new PoolBudget(opts.poolBudget ?? poolBudgetFromEnv()),
      async (child) => (await opts.limiter.usage(child.id))?.memoryBytes,
    );
  }

  /** Clean up after a crash mid-write and refill the pools the store remembers. */
  async start(): Promise<void> {
    await this.registry.start();
    for (const p of this.registry.pools()) void this.pool.setSize(p.tag, p.size, p.prewarm);
  }

  async create(
    req: CreateSnapshotT,
    caller: Caller,
    onProgress?: (m: string) => void,
    signal?: AbortSignal,
  ): Promise<SnapshotT> {
    this.registry.reserve(req.tag, null);
    try {
      await refuseWhenFull(this.opts.paths.snapshots, `snapshot create of ${req.tag}`);
      const { manifest, parent } = await createSnapshot(req, {
        paths: this.opts.paths,
        qemuVersion: await this.opts.qemuVersion(),
        onProgress: onProgress ?? (() => undefined),
        signal,
        network: this.opts.network,
        limiter: this.opts.limiter,
      });
      this.registry.markReady(req.tag, manifest);
      this.log.info({ snapshot: req.tag, parent, principal: caller.principal }, 'snapshot created');
      await this.startDefaultPool(req.tag);
      return this.registry.toWire(manifest);
    } catch (e) {
      await this.registry.release(req.tag);
      // The row can fail after the files fitted (SQLITE_FULL): disk_full too, once undone.
      throw await asDiskFull(e, this.opts.paths.snapshots, `snapshot create of ${req.tag}`);
    }
  }

  /**
   * A made snapshot's first forks are fast without asking: its pre-warmed pool starts
   * filling in the background (docs/snapshots.md; `forkd snapshot pool TAG 0` removes it).
   */
  private async startDefaultPool(tag: string): Promise<void> {
    const size = this.opts.defaultPool ?? defaultPoolFromEnv();
    if (size === 0) return;
    this.registry.setPool(tag, size, true);
    await this.pool.setSize(tag, size, true);
  }

  /** Every snapshot but the boot snapshots (hidden: `forkd images` shows them). */
  async list(): Promise<SnapshotT[]> {
    return (await this.registry.list()).filter((s) => s.boot === undefined);
  }

  get(tag: string): Promise<SnapshotT> {
    return this.registry.get(tag);
  }

  verify(tag: string): Promise<VerifyResultT> {
    return this.registry.verify(tag);
  }

  /**
   * Remove a snapshot (with `cascade` its subtree, deepest first: never a dangling chain).
   * Sandboxes forked from it are refused, or killed with `force`; running sources that
   * merely layer on it (they were branched into it) get its layer folded in and run on.
   * A `failed` one (a branch cut off) has no files anything depends on: its row goes.
   */
  async remove(tag: string, opts: { force?: boolean; cascade?: boolean }): Promise<void> {
    if (this.registry.isFailed(tag)) return this.registry.delete(tag); // nothing depends on it
    const release = await this.removals.acquire('remove');
    const held = new Map<string, () => void>();
    try {
      await this.removeHeld(tag, opts, await this.holdDisks(tag, held));
    } finally {
      for (const unlock of held.values()) unlock();
      release();
    }
  }

  /**
   * Hold the disk chain of every sandbox that depends on `tag` or a snapshot built on it,
   * so that none is branched while it is removed: a branch under way finishes first (its
   * snapshot is then one more built on `tag`, which the checks see). Removals take turns,
   * so two never wait on each other's sandboxes. Returns the manifests as they stand with
   * every such chain held.
   */
  private async holdDisks(
    tag: string,
    held: Map<string, () => void>,
  ): Promise<Map<string, SnapshotManifest>> {
    for (;;) {
      await this.registry.manifest(tag);
      const manifests = await this.registry.manifests();
      const subtree = [tag, ...descendants(tag, manifests)];
      // A sandbox forked from one and branched into another is listed under both: once.
      const more = new Set(subtree.flatMap((t) => this.opts.sandboxes.runningOn(t)));
      const next = [...more].filter((id) => !held.has(id));
      if (next.length === 0) return manifests;
      for (const id of next) held.set(id, await this.opts.sandboxes.lockDisk(id));
    }
  }

  private async removeHeld(
    tag: string,
    opts: { force?: boolean; cascade?: boolean },
    manifests: Map<string, SnapshotManifest>,
  ) {
    const below = descendants(tag, manifests);
    const subtree = opts.cascade ? [...below, tag] : [tag];
    const dependents = opts.cascade ? [] : below;
    if (dependents.length > 0) {
      throw new ForkdError(
        'snapshot_in_use',
        `snapshots are built on "${tag}": ${dependents.join(', ')}; remove them first or use --cascade`,
        { tag, snapshots: dependents },
      );
    }
    const forked = subtree.flatMap((t) => this.opts.sandboxes.forkedFrom(t));
    if (forked.length > 0 && !opts.force) {
      throw new ForkdError(
        'snapshot_in_use',
        `snapshot "${tag}" has ${forked.length} sandbox(es) forked from it: ${forked.join(', ')}; kill them or use --force`,
        { tag, sandboxes: forked },
      );
    }
    await Promise.all(forked.map((id) => this.opts.sandboxes.kill(id)));
    const ctx = { paths: this.opts.paths, sandboxes: this.opts.sandboxes, log: this.log };
    for (const t of subtree) {
      await this.pool.drop(t);
      await unpinSources(ctx, manifests.get(t) as SnapshotManifest);
      await this.registry.delete(t);
    }
  }

  /** Flatten a chained snapshot: its disk without parent layers (over its image), same memory. */
  async compact(tag: string, to: string, caller: Caller): Promise<SnapshotT> {
    const m = await this.registry.bootable(tag);
    validateTag(to);
    this.registry.reserve(to, m.source_sandbox);
    let staging: string | undefined;
    try {
      staging = await stagingDir(this.opts.paths, to);
      await flattenInto(this.opts.paths, m, staging);
      const manifest = await this.registry.publish(to, staging, {
        ...withoutDiff(m),
        tag: to,
        parent: null,
        created_at: new Date().toISOString(),
      });
      void this.evictMemory();
      this.log.info({ snapshot: to, from: tag, principal: caller.principal }, 'snapshot compacted');
      return this.registry.toWire(manifest);
    } catch (e) {
      if (staging) await rm(staging, { recursive: true, force: true });
      await this.registry.release(to);
      throw e;
    }
  }

  /**
   * A bootable snapshot whose memory a fork can map: a diff's is materialized (once: cached
   * as its `memory`), and unused caches past the budget are evicted afterwards.
   */
  private async materialized(tag: string): Promise<SnapshotManifest> {
    const m = await this.registry.bootable(tag);
    const got = await materialize(this.opts.paths, m);
    if (got.built) {
      this.log.info({ snapshot: tag, ms: got.ms }, 'materialized a diff memory for forks');
      void this.evictMemory();
    }
    return m;
  }

  /**
   * Remove unused materialized memory past the cache budget (never one a VM or pool maps);
   * queued behind the background compactions, which turn caches into stored memory.
   */
  evictMemory(): Promise<string[]> {
    const evicted = this.background
      .then(() => this.evictNow())
      .catch((err: unknown) => {
        this.log.warn({ err }, 'could not evict materialized memory');
        return [] as string[];
      });
    this.background = evicted.then(() => undefined);
    return evicted;
  }

  /** The eviction itself; only from the background queue (or from a job already in it). */
  private async evictNow(): Promise<string[]> {
    const inUse = (t: string) =>
      this.opts.sandboxes.runningOn(t).length > 0 || this.pool.state(t).size > 0;
    const budget = this.opts.memoryCacheBytes ?? memoryCacheBudget();
    return evictMaterialized(this.opts.paths, await this.registry.manifests(), inUse, budget);
  }

  /**
   * After a branch is published: past the depth bound its memory is compacted to a full
   * one in the background (its content unchanged), so no fork reads through a long chain.
   */
  settleMemoryChain(m: SnapshotManifest): void {
    const max = this.opts.memoryChainMax ?? memoryChainMax();
    const run = async () => {
      if ((await memoryDepth(this.opts.paths, m)) <= max) return;
      await compactMemory(this.opts.paths, m);
      this.log.info({ snapshot: m.tag, max_depth: max }, 'compacted a deep memory chain');
      await this.evictNow(); // in the queue already: evictMemory() would wait for itself
    };
    this.background = this.background
      .then(run)
      .catch((err: unknown) =>
        this.log.warn({ snapshot: m.tag, err }, 'could not compact a memory chain'),
      );
  }

  /** Background memory compactions, one at a time (tests and shutdown wait on it). */
  background: Promise<void> = Promise.resolve();

  async lineage(tag?: string): Promise<LineageT> {
    const manifests = await this.registry.manifests();
    // An unknown (or unpublished) tag: manifest() throws the catalog error naming it.
    if (tag && !manifests.has(tag)) await this.registry.manifest(tag);
    return lineageOf(manifests, await this.opts.sandboxes.list({}), tag);
  }

  async setPool(tag: string, size: number, opts: { prewarm?: boolean } = {}): Promise<PoolStateT> {
    checkRange('size', size, { min: 0, max: POOL_MAX });
    await this.registry.bootable(tag);
    const prewarm = Boolean(opts.prewarm);
    this.registry.setPool(tag, size, prewarm);
    await this.pool.setSize(tag, size, prewarm);
    return this.poolState(tag);
  }

  /**
   * A snapshot's pool as the API shows it, with the host memory its waiting VMs take (each
   * one's cgroup, as a sandbox's usage; null where a VM has none: limits not enforced).
   * Pool VMs are QEMUs `forkd ps` does not list as sandboxes: this is how they are seen.
   */
  async poolState(tag: string): Promise<PoolStateT> {
    const used = await Promise.all(
      this.pool.members(tag).map((c) => this.opts.limiter.usage(c.id).catch(() => undefined)),
    );
    const known = used.every((u) => u !== undefined);
    const memory = known ? used.reduce((sum, u) => sum + (u?.memoryBytes ?? 0), 0) : null;
    return { ...this.pool.state(tag), memory_bytes: memory, budget: this.poolBudget() };
  }

  /** The host-wide pool budget and what all pools take of it now. */
  poolBudget(): PoolBudgetStateT {
    const { vms, memoryBytes, limits } = this.pool.usage();
    return {
      vms: limits.vms,
      memory_bytes: limits.memoryBytes,
      used_vms: vms,
      used_memory_bytes: memoryBytes,
    };
  }

  /**
   * How a fork names a snapshot by OCI reference (`REGISTRY/REPO:TAG`): the pack service
   * answers its local tag, pulling it first when this node lacks it (wired by the services).
   */
  resolveReferencesWith(f: (reference: string) => Promise<string>): void {
    this.reference = f;
  }

  private reference?: (reference: string) => Promise<string>;

  async fork(req: ForkRequest, caller: Caller, opts: ForkOptions = {}): Promise<ForkOutcome> {
    if (req.snapshot.includes('/')) {
      if (!this.reference) {
        throw new ForkdError('unsupported', 'this daemon does not fork by OCI reference');
      }
      return this.fork({ ...req, snapshot: await this.reference(req.snapshot) }, caller, opts);
    }
    checkRange('n', req.n, { min: 1, max: FORK_MAX });
    // A pod's allow-list is of the snapshots it names, not of the boot snapshot its image has.
    if (!opts.imageStart) {
      (this.opts.podPolicy ?? PodPolicy.parse('')).check(req.snapshot, req.labels);
    }
    await refuseWhenFull(this.opts.paths.sandboxes, `fork of ${req.snapshot}`);
    const m = await this.materialized(req.snapshot);
    checkForkNetwork(m, req.network);
    await checkForkNetns(m, req);
    const ctx = {
      paths: this.opts.paths,
      pool: this.pool,
      sandboxes: this.opts.sandboxes,
      network: this.opts.network,
      limiter: this.opts.limiter,
    };
    return forkChildren(ctx, m, req, caller, opts);
  }

  /** End a pool VM that will not be used, and give back its namespace. */
  private async discard(child: PreparedChild): Promise<void> {
    await discardChild(child);
    await this.opts.network?.release(child.id);
  }
}
