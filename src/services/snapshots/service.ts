/**
 * The snapshot service: create (boot, warm, capture), the registry (list, info, verify,
 * remove), the VMM pool per snapshot, and fork — N sandboxes restored from one snapshot,
 * each mapping its memory copy-on-write. Sandboxes it forks are handed to the sandbox
 * service, which owns them from then on (timeouts, exec, kill, crash recovery).
 */
import { rm } from 'node:fs/promises';
import type {
  CreateSnapshotT,
  ForkResultT,
  PoolStateT,
  SnapshotT,
  VerifyResultT,
} from '../../api/schemas.js';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import type { Store } from '../../store/db.js';
import type { Caller, ForkRequest, SnapshotService } from '../contracts.js';
import type { SandboxManager } from '../sandboxes/service.js';
import { silentLog, type ServiceLog } from '../sandboxes/log.js';
import { createSnapshot } from './create.js';
import {
  readManifest,
  snapshotDir,
  sweepStaging,
  unbootableReason,
  validateTag,
  verifySnapshot,
  type SnapshotManifest,
} from './files.js';
import { discardChild, prepareChild, restoreChild } from './fork.js';
import { Pool } from './pool.js';

export interface SnapshotServiceOptions {
  paths: Paths;
  store: Store;
  sandboxes: SandboxManager;
  qemuVersion: () => Promise<string>;
  log?: ServiceLog;
  /** Snapshot creations at once (default 2); past it `capacity`. */
  maxCreating?: number;
}

const MAX_FORK = 100;

export class SnapshotManager implements SnapshotService {
  readonly pool: Pool;
  private readonly creating = new Set<string>();
  private readonly log: ServiceLog;

  constructor(private readonly opts: SnapshotServiceOptions) {
    this.log = opts.log ?? silentLog;
    this.pool = new Pool(
      async (tag) => prepareChild(opts.paths, await this.bootable(tag)),
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
    for (const row of this.rows.list('ready')) {
      if (row.pool_size > 0) void this.pool.setSize(row.tag, row.pool_size);
    }
  }

  async create(
    req: CreateSnapshotT,
    caller: Caller,
    onProgress?: (m: string) => void,
    signal?: AbortSignal,
  ): Promise<SnapshotT> {
    validateTag(req.tag);
    if (this.rows.get(req.tag) || this.creating.has(req.tag)) {
      throw new ForkdError(
        'name_taken',
        `snapshot "${req.tag}" already exists or is being created`,
        {
          tag: req.tag,
        },
      );
    }
    if (this.creating.size >= (this.opts.maxCreating ?? 2)) {
      throw new ForkdError('capacity', 'too many snapshots are being created; retry shortly', {
        retry_after_s: 10,
      });
    }
    this.creating.add(req.tag);
    this.rows.insert({
      tag: req.tag,
      state: 'writing',
      parent: null,
      source: null,
      dir: snapshotDir(this.opts.paths, req.tag),
    });
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
    const out: SnapshotT[] = [];
    for (const row of this.rows.list('ready')) {
      const m = await readManifest(this.opts.paths, row.tag).catch(() => undefined);
      if (m) out.push(await this.toWire(m));
    }
    return out;
  }

  async get(tag: string): Promise<SnapshotT> {
    return this.toWire(await this.manifest(tag));
  }

  async verify(tag: string): Promise<VerifyResultT> {
    const problems = await verifySnapshot(this.opts.paths, await this.manifest(tag));
    return { ok: problems.length === 0, problems };
  }

  async remove(tag: string, opts: { force?: boolean }): Promise<void> {
    await this.manifest(tag);
    const children = this.opts.sandboxes.childrenOf(tag);
    if (children.length > 0 && !opts.force) {
      throw new ForkdError(
        'snapshot_in_use',
        `snapshot "${tag}" has ${children.length} running sandbox(es): ${children.join(', ')}; kill them or use --force`,
        { tag, sandboxes: children },
      );
    }
    await Promise.all(children.map((id) => this.opts.sandboxes.kill(id)));
    await this.pool.drop(tag);
    this.rows.delete(tag);
    await rm(snapshotDir(this.opts.paths, tag), { recursive: true, force: true });
  }

  async setPool(tag: string, size: number): Promise<PoolStateT> {
    if (!Number.isInteger(size) || size < 0 || size > 64) {
      throw new ForkdError('bad_request', 'pool size must be an integer from 0 to 64', {
        field: 'size',
      });
    }
    await this.bootable(tag);
    this.rows.update(tag, { pool_size: size });
    await this.pool.setSize(tag, size);
    return this.pool.state(tag);
  }

  async fork(req: ForkRequest, caller: Caller): Promise<ForkResultT> {
    if (!Number.isInteger(req.n) || req.n < 1 || req.n > MAX_FORK) {
      throw new ForkdError('bad_request', `n must be an integer from 1 to ${MAX_FORK}`, {
        field: 'n',
      });
    }
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

  private async toWire(m: SnapshotManifest): Promise<SnapshotT> {
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
    };
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
