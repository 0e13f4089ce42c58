/**
 * The sandbox service the daemon serves, composed of parts that each own their state: the
 * live table (rows and held sandboxes: live.ts), how a sandbox starts (lifecycle.ts) and
 * ends (ending.ts), the idle tiers (idle.ts), guest I/O (guest-io.ts) and its REST view
 * (wire.ts). This class decides what a request means and hands it to the part that owns
 * it; on start it reconciles the store with what really runs (reconcile.ts).
 */
import type { Readable } from 'node:stream';
import type {
  CreateSandboxT,
  ExecRequestT,
  ExecResultT,
  FileStatT,
  GuestUserT,
  LimitsRequestT,
  PatchSandboxT,
  PtyQueryT,
  PtySessionT,
  SandboxT,
} from '../../contract/schemas.js';
import type { Paths } from '../../config.js';
import type { AgentClient } from '../../drivers/agent/client.js';
import type { SandboxState, StoredIdle } from '../../store/sandboxes.js';
import type { Store } from '../../store/db.js';
import type {
  Caller,
  ExecStream,
  PauseOptions,
  PtyAttachment,
  SandboxService,
  SandboxUsageT,
} from '../contracts.js';
import { Limiter } from '../limits.js';
import { KeyedLock } from '../../util/keyed-lock.js';
import type { NetworkManager } from '../network/service.js';
import { Endings } from './ending.js';
import { ExpiryTimers } from './expiry.js';
import { bootGate, type Gate } from './gate.js';
import { checkCallerNetns } from './caller-netns.js';
import { GuestIo } from './guest-io.js';
import type { ForkInit, ImageStarter, Lease, SandboxHost, SandboxStarter } from './host.js';
import { IdleTiers } from './idle.js';
import { Starts } from './lifecycle.js';
import { SandboxChanges } from './changes.js';
import { LiveTable } from './live.js';
import { silentLog, type ServiceLog } from '../log.js';
import type { SandboxParts } from './parts.js';
import { reconcile, type ReconcileReport } from './reconcile.js';
import { holdConnection, resolveIdle, type IdleAfter, type IdleRequest } from './tiers.js';
import { SandboxViews } from './wire.js';

export { toWire } from './wire.js';

export interface SandboxServiceOptions {
  paths: Paths;
  store: Store;
  log?: ServiceLog;
  /** Sandboxes booting at once (default 4); past it `capacity`. */
  maxBooting?: number;
  /** Commands running at once across all sandboxes (default 256); past it `capacity`. */
  maxExecs?: number;
  /** How long a boot may wait for the guest agent (default 60 s). */
  bootTimeoutMs?: number;
  /** How often an adopted QEMU's pid is checked (default 1 s). */
  pollMs?: number;
  /** Stopped and dead rows are forgotten this long after they ended (default 24 h). */
  retainEndedMs?: number;
  /** Namespaces, policies and ports; without it every sandbox has network `none`. */
  network?: NetworkManager;
  /** The cgroups of sandboxes (default: this home's, with the automatic defaults). */
  limiter?: Limiter;
  /** Pause a sandbox after this many seconds without a request (0 or none: never; docs/idle.md). */
  pauseIdleAfterS?: number;
  /** Hibernate a sandbox after this many seconds without a request (default: never). */
  hibernateIdleAfterS?: number;
  /**
   * Start sandboxes this host cannot hold to what they ask (no namespaces, cgroups or uid
   * switch), reporting what is unenforced, instead of refusing them (`--accept-unenforced`).
   */
  acceptUnenforced?: boolean;
}

/** Ended rows are pruned at start and then this often. */
const PRUNE_EVERY_MS = 60 * 60 * 1000;

export class SandboxManager implements SandboxService, SandboxHost {
  private readonly table: LiveTable;
  private readonly parts: SandboxParts;
  private readonly endings: Endings;
  private readonly starts: Starts;
  private readonly tiers: IdleTiers;
  private readonly io: GuestIo;
  private readonly views: SandboxViews;
  private readonly changes: SandboxChanges;
  private readonly idleDefaults: IdleAfter;
  private readonly diskLocks = new KeyedLock();
  /** Cold boots at once (`--max-booting`): boots from an image and wakes of halted sandboxes. */
  private readonly bootGate: Gate;
  private pruneTimer: NodeJS.Timeout | undefined;
  private fromBootSnapshot: ImageStarter | undefined;
  readonly limiter: Limiter;

  constructor(private readonly opts: SandboxServiceOptions) {
    const log = opts.log ?? silentLog;
    this.limiter = opts.limiter ?? new Limiter({ home: opts.paths.home, log });
    this.idleDefaults = {
      pauseAfterS: opts.pauseIdleAfterS || null,
      hibernateAfterS: opts.hibernateIdleAfterS || null,
    };
    const timers = new ExpiryTimers((id) => void this.endings.expire(id));
    this.table = new LiveTable(opts.store.sandboxes, timers);
    const { paths, network } = opts;
    this.parts = { paths, table: this.table, log, limiter: this.limiter, network };
    this.endings = new Endings(this.parts);
    this.views = new SandboxViews(this.parts, {
      idleDefaults: this.idleDefaults,
      acceptUnenforced: opts.acceptUnenforced ?? false,
    });
    this.bootGate = bootGate(opts.maxBooting);
    const { bootTimeoutMs } = opts;
    this.starts = new Starts(this.parts, this.endings, this.views, {
      gate: this.bootGate,
      bootTimeoutMs,
    });
    this.tiers = new IdleTiers(this.parts, this.endings, {
      defaults: this.idleDefaults,
      agentTimeoutMs: bootTimeoutMs ?? 60_000,
      bootGate: this.bootGate,
    });
    this.changes = new SandboxChanges(this.parts, this.views, this.tiers, this.idleDefaults, (id) =>
      this.get(id),
    );
    this.io = new GuestIo(this.parts, (id) => this.tiers.awake(id), opts.maxExecs ?? 256);
    // A published port's connection is a request: it wakes a paused sandbox first, and
    // keeps it from being paused while it is open.
    network?.setWaker(async (id) => {
      const live = await this.tiers.awake(id);
      return { vm: live.vm, release: holdConnection(live) };
    });
  }

  private get rows() {
    return this.table.rows;
  }

  /**
   * Reconcile the store with the host (re-adopt live QEMUs, bury dead ones, sweep stray
   * dirs) and start housekeeping. Call once before serving.
   */
  async start(): Promise<ReconcileReport> {
    this.endings.forgetEnded(this.opts.retainEndedMs);
    this.pruneTimer = setInterval(
      () => this.endings.forgetEnded(this.opts.retainEndedMs),
      PRUNE_EVERY_MS,
    );
    this.pruneTimer.unref();
    this.tiers.start();
    return reconcile({
      paths: this.opts.paths,
      rows: this.rows,
      log: this.parts.log,
      pollMs: this.opts.pollMs ?? 1000,
      bootTimeoutMs: this.opts.bootTimeoutMs ?? 60_000,
      limiter: this.limiter,
      adopt: (row, vm, agent) => this.endings.register(row, vm, agent),
      adoptHibernated: async (row) => {
        this.table.hold(row);
        await this.tiers.holdOnDiskPorts(row.id, row.dir, row.tier);
      },
      adoptNetwork: async (row, vm) => this.opts.network?.adopt(row.id, vm),
    });
  }

  /**
   * Starts from an image fork the image's boot snapshot (services/snapshots/boot-start.ts),
   * wired by buildServices: this service cannot reach snapshots itself.
   */
  useBootSnapshots(start: ImageStarter): void {
    this.fromBootSnapshot = start;
  }

  async create(req: CreateSandboxT, caller: Caller): Promise<SandboxT> {
    // Refused here, not by the boot snapshot's fork, whose failures fall back to a boot.
    await checkCallerNetns(
      req,
      req.network ?? 'nat',
      'a sandbox with network none has no NIC: a start into a network namespace needs network nat',
    );
    if (!req.cold && this.fromBootSnapshot) {
      const forked = await this.fromBootSnapshot(req, caller);
      if (forked) return forked;
    }
    return this.starts.bootImage(req, this.idlePolicy(req.idle), caller);
  }

  /**
   * Bring up a sandbox from a snapshot: its row (with the snapshot's resources) first, then
   * `start` restores the VM. Forks skip the boot gate: a restore costs a fraction of a boot.
   */
  createForked(init: ForkInit, start: SandboxStarter, caller: Caller): Promise<SandboxT> {
    return this.starts.fork(init, start, caller);
  }

  /** The policy to store for a create or fork's `idle` (bad_request when it cannot hold). */
  idlePolicy(req: IdleRequest | undefined): StoredIdle | null {
    return resolveIdle(req, this.idleDefaults);
  }

  /** Running sandboxes that depend on a snapshot: forked from it, or branched into it. */
  runningOn(tag: string): string[] {
    return this.table.activeIds((r) => r.snapshot === tag || r.disk_base === tag);
  }

  forkedFrom(tag: string): string[] {
    return this.table.activeIds((r) => r.snapshot === tag);
  }

  layeredOn(tag: string): string[] {
    return this.table.activeIds((r) => r.disk_base === tag && r.snapshot !== tag);
  }

  lockDisk(id: string): Promise<() => void> {
    return this.diskLocks.acquire(id);
  }

  async lease(id: string): Promise<Lease> {
    const { vm, agent } = await this.tiers.awake(id);
    const row = this.table.row(id);
    return {
      id,
      vm,
      info: this.views.wire(row),
      diskBase: row.disk_base,
      setDiskBase: (tag) => void this.rows.update(id, { disk_base: tag }),
      diskProblem: row.disk_problem,
      setDiskProblem: (reason) => void this.rows.update(id, { disk_problem: reason }),
      lendMemory: (bytes, what, check) =>
        this.limiter.lend(id, bytes, () => this.rows.get(id)?.limits ?? null, { what, check }),
      deathReason: () => this.endings.reasonOnceDead(id),
      flush: async (opts) => void (await agent.flush(opts)),
    };
  }

  list(filter: {
    state?: SandboxT['state'];
    label?: { key: string; value: string };
  }): Promise<SandboxT[]> {
    return this.views.list(filter);
  }

  /** One sandbox; a running one with what its QEMU uses now (its cgroup's numbers). */
  get(id: string): Promise<SandboxT> {
    return this.views.get(id);
  }

  /** Every running sandbox's limits and use, for /metrics. */
  usage(): Promise<SandboxUsageT[]> {
    return this.views.usage();
  }

  extend(id: string, timeoutS: number): Promise<SandboxT> {
    return this.changes.extend(id, timeoutS);
  }

  setLimits(id: string, req: LimitsRequestT): Promise<SandboxT> {
    return this.changes.setLimits(id, req);
  }

  update(id: string, patch: PatchSandboxT): Promise<SandboxT> {
    return this.changes.update(id, patch);
  }

  /**
   * Stop a sandbox: end its VM, remove its files, keep its row as `stopped` (reason
   * `killed`). Killing one that already stopped or died is a no-op, so a retried DELETE
   * succeeds; a starting one has its boot aborted.
   */
  async kill(id: string, opts: { wait?: boolean } = {}): Promise<void> {
    const row = this.table.row(id);
    if (await this.starts.abort(id)) return;
    if (row.state === 'stopped' || row.state === 'dead') return;
    const ending = this.endings.end(id, 'stopped', 'killed');
    if (opts.wait !== false) return ending;
    ending.catch((err: unknown) =>
      this.parts.log.error({ sandbox: id, err }, 'could not end a killed sandbox'),
    );
  }

  /**
   * A slot under the daemon's cap on running commands (`capacity` past it), for the guest
   * work other services start: an eval holds one while its code runs.
   */
  execSlot(): () => void {
    return this.io.slot();
  }

  /** The agent session of a running sandbox (woken if paused), for services that talk to its guest. */
  async agentOf(id: string): Promise<AgentClient> {
    return (await this.tiers.awake(id)).agent;
  }

  async pause(id: string, opts: PauseOptions = {}): Promise<SandboxT> {
    await this.tiers.pause(id, opts.tier ?? 'paused', opts.holdTimeout ?? false);
    return this.get(id);
  }

  async resume(id: string): Promise<SandboxT> {
    await this.tiers.awake(id);
    return this.get(id);
  }

  exec(id: string, req: ExecRequestT): Promise<ExecResultT> {
    return this.io.exec(id, req);
  }

  execStream(id: string, req: ExecRequestT): Promise<ExecStream> {
    return this.io.execStream(id, req);
  }

  writeStdin(id: string, execId: string, data: Buffer, eof: boolean): Promise<void> {
    return this.io.writeStdin(id, execId, data, eof);
  }

  killExec(id: string, execId: string, signal: string): Promise<void> {
    return this.io.killExec(id, execId, signal);
  }

  readFile(id: string, path: string): Promise<Readable> {
    return this.io.readFile(id, path);
  }

  writeFile(
    id: string,
    path: string,
    body: Readable,
    opts: { mode?: number; parents?: boolean; user?: string; xattrs?: Record<string, string> },
  ): Promise<number> {
    return this.io.writeFile(id, path, body, opts);
  }

  statFile(id: string, path: string, opts: { owners?: boolean } = {}): Promise<FileStatT> {
    return this.io.statFile(id, path, opts);
  }

  listFiles(id: string, path: string, opts: { owners?: boolean } = {}): Promise<FileStatT[]> {
    return this.io.listFiles(id, path, opts);
  }

  makeDir(
    id: string,
    path: string,
    opts: { parents?: boolean; mode?: number; user?: string },
  ): Promise<void> {
    return this.io.makeDir(id, path, opts);
  }

  guestUser(id: string, user?: string): Promise<GuestUserT> {
    return this.io.guestUser(id, user);
  }

  removeFile(id: string, path: string, opts: { recursive?: boolean }): Promise<void> {
    return this.io.removeFile(id, path, opts);
  }

  pty(
    id: string,
    req: PtyQueryT,
    onData: (chunk: Buffer, offset: number) => void,
  ): Promise<PtyAttachment> {
    return this.io.pty(id, req, onData);
  }

  ptySessions(id: string): Promise<PtySessionT[]> {
    return this.io.ptySessions(id);
  }

  /** The last 1 MiB of the guest console; an ended sandbox's is kept until its row goes. */
  consoleLog(id: string): Promise<string> {
    return this.views.consoleLog(id);
  }

  /** Sandboxes per state, for /metrics. */
  counts(): Record<SandboxState, number> {
    return this.rows.countByState();
  }

  /** In-flight counts against the caps, for /metrics and tests. */
  load(): { booting: number; execs: number } {
    return { booting: this.bootGate.count, execs: this.io.count };
  }

  /**
   * Let go of every sandbox without stopping it (daemon shutdown): timers off, agent and
   * monitor connections closed, QEMUs left running for the next daemon to adopt.
   */
  detach(): void {
    this.endings.detach();
    clearInterval(this.pruneTimer);
    this.tiers.stop();
    for (const live of this.table.all()) {
      live.agent?.close();
      live.vm?.detach();
    }
    this.table.dropAll();
  }

  /** Stop every running sandbox (tests, `forkd kill --all`). */
  async killAll(): Promise<void> {
    const ids = this.rows.active().map((r) => r.id);
    await Promise.all(ids.map((id) => this.kill(id).catch(() => undefined)));
  }
}
