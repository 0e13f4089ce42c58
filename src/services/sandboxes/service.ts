/**
 * The sandbox service the daemon serves: every sandbox has a row in the store (written
 * before its boot, so a crash mid-boot is found again), and every running one a live entry
 * here (its VM, its agent session, its timeout, its streaming execs). Enforces the
 * concurrency caps, stops sandboxes at their timeout, notices a QEMU that dies on its own,
 * and on start reconciles the store with what really runs (reconcile.ts).
 */
import { rm } from 'node:fs/promises';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import type {
  CreateSandboxT,
  EgressPolicyT,
  NetworkModeT,
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
import { LIMITS } from '../../contract/rules.js';
import type { Paths } from '../../config.js';
import type { AgentClient, ExecHandle } from '../../drivers/agent/client.js';
import type { CgroupUsage } from '../../drivers/host/cgroup.js';
import { ForkdError } from '../../errors.js';
import type { SandboxRow, SandboxState, StoredIdle } from '../../store/sandboxes.js';
import type { Store } from '../../store/db.js';
import { checkRange } from '../checks.js';
import type {
  Caller,
  ExecStream,
  PtyAttachment,
  SandboxService,
  SandboxUsageT,
} from '../contracts.js';
import { formatSize, Limiter } from '../limits.js';
import { DEFAULT_IMAGE, getImage, imageExecDefaults, type ExecDefaults } from '../images/index.js';
import { readManifest } from '../snapshots/files.js';
import {
  bootSandbox,
  destroySandbox,
  newSandboxId,
  resolveResources,
  sandboxDir,
  type Sandbox,
} from './sandbox.js';
import { runBuffered, startStreaming, withExecDefaults } from './exec.js';
import { listSessions, openOrAttach } from './pty.js';
import type { ForkInit, ImageStarter, Lease, SandboxHost, SandboxStarter } from './host.js';
import { ExpiryTimers } from './expiry.js';
import {
  busyWhile,
  changeIdle,
  guestWorked,
  holdConnection,
  idleAfterOf,
  idleMove,
  idleWire,
  resolveIdle,
  type CpuMark,
  type IdleAfter,
  type IdleRequest,
  liveVm,
  moveTo,
  needsWake,
  parkable,
  type DiskMoves,
  type Parkable,
  type SandboxTier,
} from './tiers.js';
import { crashPoint } from '../../util/crash.js';
import { captureToDisk, readImage, restoreFromDisk, type NetImage } from './hibernate.js';
import { openDownload, readTail, toWireStat } from './files.js';
import { guestUser, handOver, isRootSpec, missingDirs, ownersOf } from './owners.js';
import { Gate } from './gate.js';
import {
  forgetLogs,
  keepConsoleLog,
  keptLogPath,
  lastConsoleLine,
  removeLeftovers,
} from './leftovers.js';
import { silentLog, type ServiceLog } from './log.js';
import { reconcile, type ReconcileReport } from './reconcile.js';
import { asDiskFull, refuseWhenFull } from '../disk-full.js';
import { KeyedLock } from '../../util/keyed-lock.js';
import type { NetworkService } from '../network/service.js';
import { egressRules, mergeEgress, OPEN_EGRESS, type Egress } from '../network/policy.js';
import { checkEnforcement, unenforcedOf, type HostEnforcement } from '../enforcement.js';
import type { VmExit, VmHandle } from '../../drivers/vmm.js';
import { vmm } from '../vmm.js';

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
  network?: NetworkService;
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

/** A running sandbox as this process holds it (awake or parked: tiers.ts). */
interface Live extends Parkable {
  readonly row: Pick<SandboxRow, 'memory_mib' | 'cpus' | 'image'>;
  dir: string;
  /** Streaming execs by exec id, until they exit. */
  execs: Map<string, ExecHandle>;
  /** Its image's WorkingDir and User, read at its first command. */
  execDefaults?: Promise<ExecDefaults>;
}

/** A boot in progress, so a kill can abort it. */
interface Booting {
  abort: AbortController;
  done: Promise<unknown>;
}

const CONSOLE_TAIL_BYTES = 1024 * 1024;
/** Retry-After hints: a boot under TCG takes ~3 s; an exec slot frees quickly. */
const BOOT_RETRY_S = 3;
const EXEC_RETRY_S = 1;
/** Ended rows are pruned at start and then this often. */
const PRUNE_EVERY_MS = 60 * 60 * 1000;
/** How often the idle policy looks for sandboxes to park. */
const IDLE_SWEEP_MS = 1000;

/** A sandbox that is not hibernated: its QEMU and agent session are there. */
type AwakeLive = Live & { vm: VmHandle; agent: AgentClient };

/** What a sandbox's `starting` row is made from, for a boot or a fork. */
type StartingInit = Omit<ForkInit, 'snapshot'> & { snapshot: string | null };

export class SandboxManager implements SandboxService, SandboxHost {
  private readonly live = new Map<string, Live>();
  private readonly booting = new Map<string, Booting>();
  private readonly ending = new Map<string, Promise<void>>();
  private readonly bootGate: Gate;
  private readonly execGate: Gate;
  private readonly timers: ExpiryTimers;
  private readonly log: ServiceLog;
  private hostEnforcement: HostEnforcement | undefined;
  private pruneTimer: NodeJS.Timeout | undefined;
  private idleTimer: NodeJS.Timeout | undefined;
  private sweeping = false;
  private readonly diskLocks = new KeyedLock();
  private detached = false;
  private fromBootSnapshot: ImageStarter | undefined;
  readonly limiter: Limiter;

  constructor(private readonly opts: SandboxServiceOptions) {
    this.log = opts.log ?? silentLog;
    this.limiter = opts.limiter ?? new Limiter({ home: opts.paths.home, log: this.log });
    this.bootGate = new Gate('sandboxes booting', opts.maxBooting ?? 4, BOOT_RETRY_S);
    this.execGate = new Gate('commands running', opts.maxExecs ?? 256, EXEC_RETRY_S);
    this.timers = new ExpiryTimers((id) => void this.expire(id));
    // A published port's connection is a request: it wakes a parked sandbox first, and
    // keeps it from being parked while it is open.
    opts.network?.setWaker(async (id) => {
      const live = await this.awake(id);
      return { vm: live.vm, release: holdConnection(live) };
    });
  }

  private get rows() {
    return this.opts.store.sandboxes;
  }

  /**
   * Reconcile the store with the host (re-adopt live QEMUs, bury dead ones, sweep stray
   * dirs) and start housekeeping. Call once before serving.
   */
  async start(): Promise<ReconcileReport> {
    this.prune();
    this.pruneTimer = setInterval(() => this.prune(), PRUNE_EVERY_MS);
    this.pruneTimer.unref();
    // Always on: a sandbox may have a policy of its own whatever the daemon's defaults.
    this.idleTimer = setInterval(() => this.parkIdle(), IDLE_SWEEP_MS);
    this.idleTimer.unref();
    return reconcile({
      paths: this.opts.paths,
      rows: this.rows,
      log: this.log,
      pollMs: this.opts.pollMs ?? 1000,
      bootTimeoutMs: this.opts.bootTimeoutMs ?? 60_000,
      limiter: this.limiter,
      adopt: (row, vm, agent) => this.register(row, vm, agent),
      adoptHibernated: async (row) => {
        this.hold(row);
        await this.holdParkedPorts(row.id, row.dir);
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
    if (!req.cold && this.fromBootSnapshot) {
      const forked = await this.fromBootSnapshot(req, caller);
      if (forked) return forked;
    }
    return this.bootImageCold(req, caller);
  }

  /** A real boot of the image's kernel: `cold`, or no boot snapshot to be had. */
  private async bootImageCold(req: CreateSandboxT, caller: Caller): Promise<SandboxT> {
    return this.bootGate.around(async () => {
      const res = resolveResources({ memoryMiB: req.memory_mib, cpus: req.cpus });
      const idle = this.idlePolicy(req.idle);
      const image = req.image ?? DEFAULT_IMAGE;
      await getImage(this.opts.paths, image); // image_not_found before anything exists
      const limits = await this.limiter.resolve(req.limits, res);
      const mode = req.network ?? 'nat';
      await this.checkEnforcement(mode, mergeEgress(OPEN_EGRESS, req.egress));
      await refuseWhenFull(this.opts.paths.sandboxes, `create from ${image}`);
      const starting = this.insertStarting({
        limits,
        image,
        snapshot: null,
        parent: null,
        memoryMiB: res.memoryMiB,
        cpus: res.cpus,
        labels: req.labels,
        env: req.env,
        timeoutS: req.timeout_s,
        idle,
      });
      const net = { mode: req.network ?? 'nat', egress: req.egress } as const;
      const row = await this.boot(starting, req.timeout_s, undefined, net).catch(async (e) => {
        throw await asDiskFull(e, this.opts.paths.sandboxes, `create from ${image}`);
      });
      this.log.info(
        { sandbox: row.id, principal: caller.principal, pid: row.pid },
        'sandbox created',
      );
      return this.wire(row);
    });
  }

  /**
   * Bring up a sandbox from a snapshot: its row (with the snapshot's resources) first, then
   * `start` restores the VM. Forks skip the boot gate: a restore costs a fraction of a boot.
   */
  async createForked(init: ForkInit, start: SandboxStarter, caller: Caller): Promise<SandboxT> {
    await this.checkEnforcement(init.network ?? 'none', init.egress ?? OPEN_EGRESS);
    const starting = this.insertStarting(init);
    const row = await this.boot(starting, init.timeoutS, start);
    this.log.info(
      { sandbox: row.id, snapshot: init.snapshot, principal: caller.principal },
      'sandbox forked',
    );
    return this.wire(row);
  }

  /** The `starting` row a boot or a fork begins with (so a crash mid-way finds it). */
  private insertStarting(init: StartingInit): SandboxRow {
    const id = init.id ?? newSandboxId();
    return this.rows.insert({
      id,
      state: 'starting',
      image: init.image,
      snapshot: init.snapshot,
      parent: init.parent,
      memory_mib: init.memoryMiB,
      cpus: init.cpus,
      labels: init.labels ?? {},
      env: init.env ?? {},
      created_at: new Date().toISOString(),
      expires_at: init.timeoutS === undefined ? null : expiry(init.timeoutS),
      pid: null,
      dir: sandboxDir(this.opts.paths, id),
      reason: null,
      limits: init.limits ?? null,
      idle: init.idle ?? null,
    });
  }

  /** The daemon's idle times (`--pause-idle-after`, `--hibernate-idle-after`), null: never. */
  private get idleDefaults(): IdleAfter {
    return {
      pauseAfterS: this.opts.pauseIdleAfterS || null,
      hibernateAfterS: this.opts.hibernateIdleAfterS || null,
    };
  }

  /** The policy to store for a create or fork's `idle` (bad_request when it cannot hold). */
  idlePolicy(req: IdleRequest | undefined): StoredIdle | null {
    return resolveIdle(req, this.idleDefaults);
  }

  /** Running sandboxes that depend on a snapshot: forked from it, or branched into it. */
  runningOn(tag: string): string[] {
    return this.activeIds((r) => r.snapshot === tag || r.disk_base === tag);
  }

  forkedFrom(tag: string): string[] {
    return this.activeIds((r) => r.snapshot === tag);
  }

  layeredOn(tag: string): string[] {
    return this.activeIds((r) => r.disk_base === tag && r.snapshot !== tag);
  }

  lockDisk(id: string): Promise<() => void> {
    return this.diskLocks.acquire(id);
  }

  private activeIds(which: (row: SandboxRow) => boolean): string[] {
    return this.rows
      .active()
      .filter(which)
      .map((r) => r.id);
  }

  async lease(id: string): Promise<Lease> {
    const { vm } = await this.awake(id);
    const row = this.row(id);
    return {
      id,
      vm,
      info: this.wire(row),
      diskBase: row.disk_base,
      setDiskBase: (tag) => void this.rows.update(id, { disk_base: tag }),
      diskProblem: row.disk_problem,
      setDiskProblem: (reason) => void this.rows.update(id, { disk_problem: reason }),
      lendMemory: (bytes, what, check) =>
        this.limiter.lend(id, bytes, () => this.rows.get(id)?.limits ?? null, { what, check }),
      deathReason: () => this.deathReason(id),
    };
  }

  /** The reason recorded for a sandbox whose QEMU exited, waiting up to 2 s for it. */
  private async deathReason(id: string): Promise<string | null> {
    for (let i = 0; i < 40; i++) {
      const row = this.rows.get(id);
      if (!row || row.state === 'dead') return row?.reason ?? null;
      await new Promise((r) => setTimeout(r, 50));
    }
    return null;
  }

  /** Boot a `starting` row's VM; on failure the row goes (or, when killed meanwhile, says so). */
  private async boot(
    starting: SandboxRow,
    timeoutS: number | undefined,
    start?: SandboxStarter,
    net: NetRequest = { mode: 'none' },
  ): Promise<SandboxRow> {
    const { id } = starting;
    const abort = new AbortController();
    const onStarted = (vm: VmHandle) => this.rows.update(id, { pid: vm.pid });
    const boot = start
      ? start({ id, env: starting.env, signal: abort.signal, onStarted })
      : this.bootImage(starting, net, abort.signal, onStarted);
    const settled = this.settleBoot(starting, boot, abort.signal, timeoutS);
    // A kill waits for all of it, row update included, before it returns.
    this.booting.set(id, { abort, done: settled.catch(() => undefined) });
    try {
      return await settled;
    } finally {
      this.booting.delete(id);
    }
  }

  /** Boot from an image, with its NIC and policy in place before QEMU starts. */
  private async bootImage(
    starting: SandboxRow,
    net: NetRequest,
    signal: AbortSignal,
    onStarted: (vm: VmHandle) => void,
  ): Promise<Sandbox> {
    const network = this.opts.network;
    const id = starting.id;
    const egress = mergeEgress(OPEN_EGRESS, net.egress);
    const vmNet = network ? await network.lease(id, net.mode, egress) : undefined;
    return bootSandbox(this.opts.paths, {
      id,
      image: starting.image as string,
      memoryMiB: starting.memory_mib,
      cpus: starting.cpus,
      env: starting.env,
      bootTimeoutMs: this.opts.bootTimeoutMs,
      signal,
      onStarted,
      onSpawn: (pid) => this.placeBoot(starting, pid),
      net: vmNet,
    });
  }

  /** A booting sandbox's QEMU joins its cgroup (a row from before limits has none). */
  private async placeBoot(row: SandboxRow, pid: number): Promise<void> {
    if (row.limits) await this.limiter.place(row.id, row.limits, pid);
  }

  private async settleBoot(
    starting: SandboxRow,
    boot: Promise<Sandbox>,
    aborted: AbortSignal,
    timeoutS: number | undefined,
  ): Promise<SandboxRow> {
    const { id } = starting;
    try {
      const sb = await boot;
      if (aborted.aborted) {
        await destroySandbox(sb); // killed in the instant between the boot's end and now
        throw aborted.reason;
      }
      const row = this.rows.update(id, {
        state: 'running',
        pid: sb.vm.pid,
        expires_at: this.runningExpiry(id, starting.expires_at, timeoutS),
      }) as SandboxRow;
      this.register(row, sb.vm, sb.agent);
      return row;
    } catch (e) {
      await this.opts.network?.release(id);
      await this.limiter.remove(id); // its QEMU is gone: the boot or fork ended it
      if (!aborted.aborted) {
        this.rows.delete(id);
        throw e;
      }
      this.rows.update(id, { state: 'stopped', reason: 'killed', pid: null });
      throw new ForkdError('sandbox_not_running', `sandbox ${id} was killed while it started`, {
        id,
      });
    }
  }

  /**
   * A timeout counts from when the sandbox runs (a boot under TCG with others booting can
   * take several seconds). The row carried a provisional deadline meanwhile, so a crash
   * mid-boot still has one; an extend during the boot wins over both.
   */
  private runningExpiry(id: string, provisional: string | null, timeoutS?: number) {
    const current = this.rows.get(id)?.expires_at ?? null;
    if (timeoutS === undefined || current !== provisional) return current;
    return expiry(timeoutS);
  }

  /** Hold a running sandbox: arm its timeout, watch its QEMU. */
  private register(row: SandboxRow, vm: VmHandle, agent: AgentClient): void {
    const live = this.hold(row);
    live.vm = vm;
    live.agent = agent;
    this.watch(live, vm);
  }

  /** Hold a sandbox (a hibernated one has no QEMU yet) and arm its timeout. */
  private hold(row: SandboxRow): Live {
    const live: Live = {
      id: row.id,
      dir: row.dir,
      row: { memory_mib: row.memory_mib, cpus: row.cpus, image: row.image },
      vm: undefined,
      agent: undefined,
      execs: new Map(),
      ...parkable(row.tier),
    };
    this.live.set(row.id, live);
    this.timers.arm(row.id, row.expires_at);
    return live;
  }

  /** Notice when this QEMU of the sandbox exits on its own. */
  private watch(live: Live, vm: VmHandle): void {
    void vm.waitExit().then((exit) => this.onVmExit(live, vm, exit));
  }

  async list(filter: {
    state?: SandboxT['state'];
    label?: { key: string; value: string };
  }): Promise<SandboxT[]> {
    const { label } = filter;
    return this.rows
      .list(filter.state)
      .filter((r) => !label || r.labels[label.key] === label.value)
      .map((r) => this.wire(r));
  }

  /** One sandbox; a running one with what its QEMU uses now (its cgroup's numbers). */
  async get(id: string): Promise<SandboxT> {
    if (!this.hostEnforcement) await this.enforcement();
    const wire = this.wire(this.row(id));
    const vm = this.live.get(id)?.vm;
    const usage = vm ? await this.limiter.usage(id) : undefined;
    if (usage) wire.usage = toWireUsage(usage);
    const pid = vm?.pid;
    const confined = pid === undefined ? undefined : await vmm().confinement.of(pid);
    if (confined) {
      const { uid, seccomp, sandbox, spawn, capabilities, namespaces } = confined;
      wire.confinement = { uid, seccomp, sandbox, spawn, capabilities, namespaces };
    }
    return wire;
  }

  /** Every running sandbox's limits and use, for /metrics. */
  async usage(): Promise<SandboxUsageT[]> {
    const all = await Promise.all(
      [...this.live.values()]
        .filter((l) => l.vm)
        .map(async ({ id }) => {
          const usage = await this.limiter.usage(id).catch(() => undefined);
          const limits = this.rows.get(id)?.limits ?? null;
          return usage && { id, limits, ...toWireUsage(usage) };
        }),
    );
    return all.filter((u): u is SandboxUsageT => u !== undefined);
  }

  async extend(id: string, timeoutS: number): Promise<SandboxT> {
    checkRange('timeout_s', timeoutS, LIMITS.timeoutS);
    const row = this.row(id);
    if (row.state !== 'starting' && row.state !== 'running') throw notRunning(row);
    const updated = this.rows.update(id, { expires_at: expiry(timeoutS) }) as SandboxRow;
    if (this.live.has(id)) this.timers.arm(id, updated.expires_at);
    return this.wire(updated);
  }

  /**
   * New limits for a running sandbox: each given field replaces its value, the others stay;
   * checked like a create's (guest RAM, host cores). The cgroup changes first, so a limit
   * the kernel refuses (memory below what it uses now) leaves the row as it was.
   */
  async setLimits(id: string, req: LimitsRequestT): Promise<SandboxT> {
    const live = this.running(id);
    const row = this.row(id);
    const ctx = { memoryMiB: row.memory_mib, cpus: row.cpus, inherited: row.limits ?? undefined };
    const limits = await this.limiter.resolve(req, ctx);
    // A hibernated one has no cgroup: its wake makes it with the limits in its row.
    if (live.vm && row.limits) await this.limiter.apply(id, limits);
    else if (live.vm) await this.limiter.place(id, limits, live.vm.pid);
    this.log.info({ sandbox: id, limits }, 'sandbox limits changed');
    return this.wire(this.rows.update(id, { limits }) as SandboxRow);
  }

  /**
   * PATCH: change a running sandbox's limits, idle policy and timeout together. The idle
   * policy and the timeout are checked before anything changes, so a refused request
   * (bad values, limits the kernel will not take) leaves the sandbox as it was.
   */
  async update(id: string, patch: PatchSandboxT): Promise<SandboxT> {
    const { timeout_s: timeoutS, limits, idle } = patch;
    if (timeoutS !== undefined) checkRange('timeout_s', timeoutS, LIMITS.timeoutS);
    const policy = idle === undefined ? undefined : this.nextIdle(this.row(id), idle);
    let changed = limits ? await this.setLimits(id, limits) : undefined;
    if (policy !== undefined) changed = this.applyIdle(id, policy);
    if (timeoutS !== undefined) changed = await this.extend(id, timeoutS);
    return changed ?? this.get(id);
  }

  /**
   * A running sandbox's new idle policy: its times left out keep their value now; null
   * (none of its own) makes it follow the daemon's defaults again.
   */
  private nextIdle(row: SandboxRow, req: IdleRequest | null): StoredIdle | null {
    if (row.state !== 'starting' && row.state !== 'running') throw notRunning(row);
    return req === null ? null : changeIdle(row.idle, req, this.idleDefaults);
  }

  /**
   * Store it (a restarted daemon keeps it) and apply it at once: a parked sandbox stays in
   * its tier, and the new times count from now.
   */
  private applyIdle(id: string, idle: StoredIdle | null): SandboxT {
    const updated = this.rows.update(id, { idle }) as SandboxRow;
    const live = this.live.get(id);
    if (live) live.lastUsed = Date.now();
    this.log.info({ sandbox: id, idle }, 'sandbox idle policy changed');
    return this.wire(updated);
  }

  /**
   * Stop a sandbox: end its VM, remove its files, keep its row as `stopped` (reason
   * `killed`). Killing one that already stopped or died is a no-op, so a retried DELETE
   * succeeds; a starting one has its boot aborted.
   */
  async kill(id: string): Promise<void> {
    const row = this.row(id);
    const booting = this.booting.get(id);
    if (booting) {
      booting.abort.abort(new ForkdError('sandbox_not_running', 'killed while starting'));
      await booting.done;
      return;
    }
    if (row.state === 'stopped' || row.state === 'dead') return;
    await this.end(id, 'stopped', 'killed');
  }

  /**
   * A slot under the daemon's cap on running commands (`capacity` past it), for the guest
   * work other services start: an eval holds one while its code runs.
   */
  execSlot(): () => void {
    return this.execGate.enter();
  }

  /** The agent session of a running sandbox (woken if parked), for services that talk to its guest. */
  async agentOf(id: string): Promise<AgentClient> {
    return (await this.awake(id)).agent;
  }

  async pause(id: string, opts: { tier?: 'paused' | 'hibernated' } = {}): Promise<SandboxT> {
    const live = this.running(id);
    const to = opts.tier ?? 'paused';
    if (to === 'hibernated' && live.busy > 0) {
      throw new ForkdError(
        'bad_request',
        `sandbox ${id} has a command, upload or terminal under way: its stream would end with the QEMU; pause it, or hibernate it once they are done`,
        { id, tier: to },
      );
    }
    await this.moveLive(live, to);
    return this.get(id);
  }

  async resume(id: string): Promise<SandboxT> {
    await this.awake(id);
    return this.get(id);
  }

  /** A running sandbox for a request: woken first when parked (transparently), marked used. */
  private async awake(id: string): Promise<AwakeLive> {
    const live = this.running(id);
    live.lastUsed = Date.now();
    if (needsWake(live)) {
      const from = live.tier;
      await this.moveLive(live, 'running');
      live.lastUsed = Date.now(); // its idle time counts from the end of a wake (seconds from disk)
      this.log.info({ sandbox: id, from }, 'sandbox woken');
    }
    liveVm(live);
    return live as AwakeLive;
  }

  /**
   * The idle policy: park every sandbox nobody used for its pause- or hibernate-after time
   * whose guest stayed quiet meanwhile. One sweep at a time (each reads QEMUs' CPU time).
   */
  private parkIdle(): void {
    if (this.sweeping) return;
    this.sweeping = true;
    Promise.all([...this.live.values()].map((live) => this.parkIfIdle(live)))
      .catch((e: unknown) => this.log.warn({ err: e }, 'idle sweep failed'))
      .finally(() => (this.sweeping = false));
  }

  private async parkIfIdle(live: Live): Promise<void> {
    const after = idleAfterOf(this.rows.get(live.id)?.idle, this.idleDefaults);
    if (after.pauseAfterS === null && after.hibernateAfterS === null) return;
    const running = live.tier === 'running';
    // QEMU's CPU is read once after each request (the mark) and when a move is due, not
    // every sweep: with the default policy every running sandbox is swept each second.
    if (running && (!live.quiet || live.quiet.at < live.lastUsed)) {
      const mark = await this.cpuMark(live);
      if (mark) {
        live.quiet = mark; // used since: its quiet time is measured from now on
        return;
      }
    }
    const to = this.ending.has(live.id) ? null : idleMove(live, after, Date.now());
    if (!to) return;
    const cpu = running ? await this.cpuMark(live) : undefined;
    if (cpu && live.quiet && guestWorked(live.quiet, cpu)) {
      live.lastUsed = Date.now(); // its own job keeps it awake, a full idle time more
      return;
    }
    this.log.info({ sandbox: live.id, tier: to, ...after }, 'parking an idle sandbox');
    await this.moveLive(live, to).catch((e: unknown) =>
      this.log.warn({ sandbox: live.id, tier: to, err: e }, 'could not park an idle sandbox'),
    );
  }

  private async cpuMark(live: Live): Promise<CpuMark | undefined> {
    const cpuS = await live.vm?.cpuDemand();
    return cpuS === undefined ? undefined : { at: Date.now(), cpuS };
  }

  private moveLive(live: Live, to: SandboxTier): Promise<void> {
    return moveTo(live, to, this.diskMoves(live), (tier) => {
      this.rows.update(live.id, { tier, pid: live.vm?.pid ?? null });
    });
  }

  /** How this sandbox goes to disk and comes back (hibernate.ts does the files and QEMU). */
  private diskMoves(live: Live): DiskMoves {
    return {
      hibernate: () => this.hibernate(live),
      restore: () => this.restore(live),
    };
  }

  /**
   * Capture it to disk, end its QEMU (no process, no memory), and let go of what only a
   * running QEMU needs: its cgroup and its network namespace (its policy and published
   * ports are in the capture's image, put back by the wake). A capture that fails leaves it
   * as it was.
   */
  private async hibernate(live: Live): Promise<void> {
    const vm = liveVm(live);
    const wasRunning = live.tier === 'running';
    const staged = await captureToDisk(vm, await this.netImage(live.id)).catch(
      async (e: unknown) => {
        if (wasRunning) await vm.resume().catch(() => undefined); // the capture stopped it
        throw e;
      },
    );
    // The tier is recorded before its QEMU ends: a daemon that dies from here on finds the
    // staged capture on its next start and holds it hibernated, not dead (reconcile.ts).
    this.rows.update(live.id, { tier: 'hibernated' });
    crashPoint('hibernate:recorded');
    // From here its QEMU's exit is ours, not a death (onVmExit compares the VM).
    live.vm = undefined;
    live.agent?.close();
    live.agent = undefined;
    await vm.kill();
    crashPoint('hibernate:ended');
    try {
      await staged.commit();
      const { image } = staged;
      this.log.info(
        { sandbox: live.id, memory_bytes: image.memory_bytes, pause_ms: image.pause_ms },
        'sandbox hibernated',
      );
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      // Not awaited: the ending waits for this move to settle first.
      void this.end(live.id, 'dead', `its hibernation could not be written: ${why}`);
      throw e;
    }
    await this.opts.network?.park(live.id); // its published ports keep listening
    await this.limiter.remove(live.id);
  }

  /** After a daemon restart a hibernated sandbox's published ports listen again. */
  private async holdParkedPorts(id: string, dir: string): Promise<void> {
    const network = this.opts.network;
    if (!network) return;
    const image = await readImage(dir).catch(() => undefined);
    if (!image?.ports.length) return;
    await network.holdParked(
      id,
      image.nic ? 'nat' : 'none',
      image.egress ?? OPEN_EGRESS,
      image.ports,
    );
  }

  /** The policy and published ports a wake puts back. */
  private async netImage(id: string): Promise<NetImage> {
    const net = this.opts.network;
    if (!net?.modeOf(id)) return { ports: [] };
    const state = await net.state(id);
    return { egress: state.egress, ports: state.ports };
  }

  /**
   * A hibernated sandbox back under its id: a network of its own again (the same NIC,
   * policy and published host ports), its cgroup, then a QEMU restored from its capture.
   */
  private async restore(live: Live): Promise<void> {
    const image = await readImage(live.dir);
    const row = this.row(live.id);
    const network = this.opts.network;
    const mode = image.nic ? 'nat' : 'none';
    const leased = network ? await network.lease(live.id, mode, image.egress) : undefined;
    const net = image.nic ? (leased ?? (image.restrict ? { restrict: true } : {})) : undefined;
    try {
      const { vm, agent } = await restoreFromDisk(image, {
        dir: live.dir,
        memoryMiB: live.row.memory_mib,
        cpus: live.row.cpus,
        net,
        onSpawn: async (pid) => {
          if (row.limits) await this.limiter.place(live.id, row.limits, pid);
        },
        agentTimeoutMs: this.opts.bootTimeoutMs ?? 60_000,
      });
      live.vm = vm;
      live.agent = agent;
      this.watch(live, vm);
      await this.republish(live.id, vm, image);
    } catch (e) {
      await network?.park(live.id); // still hibernated: its ports keep listening
      await this.limiter.remove(live.id);
      throw e;
    }
  }

  /** Its published ports again, on the host ports they had (one taken meanwhile is logged). */
  private async republish(id: string, vm: VmHandle, image: NetImage): Promise<void> {
    const network = this.opts.network;
    if (!network) return;
    if (image.egress) await network.enforce(id, image.egress);
    for (const p of image.ports) {
      await network
        .publish(id, vm, p.port, { hostPort: p.host_port, bind: p.host })
        .catch((e: unknown) =>
          this.log.warn({ sandbox: id, port: p.port, err: e }, 'could not publish a port again'),
        );
    }
  }

  async exec(id: string, req: ExecRequestT): Promise<ExecResultT> {
    const live = await this.awake(id);
    const full = withExecDefaults(req, await this.defaultsOf(id, live));
    return busyWhile(
      live,
      this.execGate.around(() => runBuffered(live.agent, full)),
    );
  }

  async execStream(id: string, req: ExecRequestT): Promise<ExecStream> {
    const live = await this.awake(id);
    const full = withExecDefaults(req, await this.defaultsOf(id, live));
    const release = this.execGate.enter();
    try {
      const { stream, handle } = await startStreaming(live.agent, full);
      live.execs.set(stream.execId, handle);
      void busyWhile(live, handle.result).catch(() => undefined);
      const done = () => {
        release();
        live.execs.delete(stream.execId);
      };
      handle.result.then(done, done);
      return stream;
    } catch (e) {
      release();
      throw e;
    }
  }

  async writeStdin(id: string, execId: string, data: Buffer, eof: boolean): Promise<void> {
    const handle = await this.execOf(id, execId);
    if (data.length > 0) await handle.writeStdin(data);
    if (eof) await handle.endStdin();
  }

  async killExec(id: string, execId: string, signal: string): Promise<void> {
    await (await this.execOf(id, execId)).kill(signal);
  }

  async readFile(id: string, path: string): Promise<Readable> {
    return openDownload((await this.awake(id)).agent, path);
  }

  async writeFile(
    id: string,
    path: string,
    body: Readable,
    opts: { mode?: number; parents?: boolean; user?: string; xattrs?: Record<string, string> },
  ): Promise<number> {
    const live = await this.awake(id);
    const { user, xattrs, ...rest } = opts;
    if (xattrs) live.agent.requireXattrs();
    const spec = user ?? (await this.defaultsOf(id, live)).user;
    const owner = spec && !isRootSpec(spec) ? await guestUser(live.agent, spec) : undefined;
    const created =
      owner && rest.parents !== false ? await missingDirs(live.agent, posix.dirname(path)) : [];
    const size = await busyWhile(
      live,
      live.agent.writeFile(path, body as AsyncIterable<Buffer>, rest),
    );
    if (owner) await handOver(live.agent, owner, [...created, path]);
    if (xattrs && Object.keys(xattrs).length) await live.agent.setXattrs(path, xattrs);
    return size;
  }

  async statFile(id: string, path: string, opts: { owners?: boolean } = {}): Promise<FileStatT> {
    const agent = (await this.awake(id)).agent;
    const stat = toWireStat(await agent.stat(path));
    return opts.owners ? { ...stat, ...(await ownersOf(agent, [path]))[0] } : stat;
  }

  async listFiles(id: string, path: string, opts: { owners?: boolean } = {}): Promise<FileStatT[]> {
    const agent = (await this.awake(id)).agent;
    const entries = (await agent.list(path)).map(toWireStat);
    if (!opts.owners) return entries;
    const owners = await ownersOf(
      agent,
      entries.map((e) => posix.join(path, e.name)),
    );
    return entries.map((e, i) => ({ ...e, ...owners[i] }));
  }

  async makeDir(
    id: string,
    path: string,
    opts: { parents?: boolean; mode?: number; user?: string },
  ): Promise<void> {
    const live = await this.awake(id);
    const agent = live.agent;
    const { user, ...rest } = opts;
    const spec = user ?? (await this.defaultsOf(id, live)).user;
    const owner = spec && !isRootSpec(spec) ? await guestUser(agent, spec) : undefined;
    const created = owner && rest.parents ? await missingDirs(agent, path) : [];
    await agent.mkdir(path, rest);
    if (owner) await handOver(agent, owner, rest.parents ? created : [path]);
  }

  /**
   * Who a call that names `user` (or none: the sandbox's default user, else root) acts as
   * in the guest, with its home, and the directory its commands start in by default.
   */
  async guestUser(id: string, user?: string): Promise<GuestUserT> {
    const live = await this.awake(id);
    const defaults = await this.defaultsOf(id, live);
    const u = await guestUser(live.agent, user ?? defaults.user ?? 'root');
    return { name: u.name, uid: u.uid, gid: u.gid, home: u.home, cwd: defaults.cwd ?? u.home };
  }

  async removeFile(id: string, path: string, opts: { recursive?: boolean }): Promise<void> {
    await (await this.awake(id)).agent.remove(path, opts);
  }

  /** A terminal session: opened, or reattached by its session id (the agent holds it). */
  async pty(
    id: string,
    req: PtyQueryT,
    onData: (chunk: Buffer, offset: number) => void,
  ): Promise<PtyAttachment> {
    const live = await this.awake(id);
    // A reattach joins the session as it runs (and refuses cwd and user).
    const full = req.session ? req : withExecDefaults(req, await this.defaultsOf(id, live));
    const attachment = await openOrAttach(live.agent, full, onData);
    void busyWhile(live, attachment.ended).catch(() => undefined);
    return attachment;
  }

  /**
   * The working directory and user of the sandbox's commands that name none, as Docker
   * applies an image's to `docker exec`: what its snapshot recorded (`snapshot create
   * --user/--workdir`, else the image's), for a sandbox booted from an image its image
   * config's WorkingDir and User. Read once per process: neither changes while it runs.
   */
  private defaultsOf(id: string, live: Live): Promise<ExecDefaults> {
    live.execDefaults ??= this.readDefaults(id);
    return live.execDefaults;
  }

  private async readDefaults(id: string): Promise<ExecDefaults> {
    const { image, snapshot } = this.row(id);
    const m = snapshot
      ? await readManifest(this.opts.paths, snapshot).catch(() => undefined)
      : undefined;
    // A build's result records its WORKDIR and USER in its config (docs/build.md).
    const user = m?.user ?? (m?.config?.user?.split(':')[0] || undefined);
    const workdir = m?.workdir ?? m?.config?.working_dir;
    if (user || workdir) return { ...(workdir ? { cwd: workdir } : {}), ...(user ? { user } : {}) };
    if (!image) return {};
    return getImage(this.opts.paths, image).then(imageExecDefaults, () => ({}));
  }

  async ptySessions(id: string): Promise<PtySessionT[]> {
    return listSessions((await this.awake(id)).agent);
  }

  /** The last 1 MiB of the guest console; an ended sandbox's is kept until its row goes. */
  async consoleLog(id: string): Promise<string> {
    const row = this.row(id);
    const ended = row.state === 'stopped' || row.state === 'dead';
    const path = ended ? keptLogPath(this.opts.paths.home, id) : vmm().filesOf(row.dir).console;
    return readTail(path, CONSOLE_TAIL_BYTES);
  }

  /** Sandboxes per state, for /metrics. */
  counts(): Record<SandboxState, number> {
    return this.rows.countByState();
  }

  /** In-flight counts against the caps, for /metrics and tests. */
  load(): { booting: number; execs: number } {
    return { booting: this.bootGate.count, execs: this.execGate.count };
  }

  /**
   * Let go of every sandbox without stopping it (daemon shutdown): timers off, agent and
   * monitor connections closed, QEMUs left running for the next daemon to adopt.
   */
  detach(): void {
    this.detached = true;
    clearInterval(this.pruneTimer);
    clearInterval(this.idleTimer);
    this.timers.clearAll();
    for (const live of this.live.values()) {
      live.agent?.close();
      live.vm?.detach();
    }
    this.live.clear();
  }

  /** Stop every running sandbox (tests, `forkd kill --all`). */
  async killAll(): Promise<void> {
    const ids = this.rows.active().map((r) => r.id);
    await Promise.all(ids.map((id) => this.kill(id).catch(() => undefined)));
  }

  private async expire(id: string): Promise<void> {
    this.log.info({ sandbox: id }, 'sandbox timed out');
    await this.end(id, 'stopped', 'timeout').catch((e: unknown) =>
      this.log.error({ sandbox: id, err: e }, 'could not stop a timed-out sandbox'),
    );
  }

  /** End a live sandbox once (concurrent callers share the same ending). */
  private end(id: string, state: 'stopped' | 'dead', reason: string): Promise<void> {
    const pending = this.ending.get(id);
    if (pending) return pending;
    const live = this.live.get(id);
    if (!live) return Promise.resolve();
    const ending = (async () => {
      this.timers.clear(id);
      // Waits for a move under way (a capture, a restore): what it leaves is ended too.
      await live.turn;
      const vm = live.vm;
      live.vm = undefined;
      live.agent?.close();
      await vm?.kill();
      await this.opts.network?.release(id);
      await this.limiter.remove(id);
      this.rows.update(id, { state, reason, pid: null, tier: 'running' });
      this.live.delete(id);
      await keepConsoleLog(this.opts.paths.home, id, live.dir).catch(() => undefined);
      await rm(live.dir, { recursive: true, force: true });
    })().finally(() => this.ending.delete(id));
    this.ending.set(id, ending);
    return ending;
  }

  /** QEMU exited and nobody asked: the sandbox is dead; say why, clean up. */
  private async onVmExit(live: Live, vm: VmHandle, exit: VmExit): Promise<void> {
    if (this.detached || this.ending.has(live.id) || this.live.get(live.id) !== live) return;
    if (live.vm !== vm) return; // ended on purpose (hibernated), or an earlier QEMU of it
    this.live.delete(live.id);
    this.timers.clear(live.id);
    live.agent?.close();
    await this.opts.network?.release(live.id);
    const oom = await this.oomReason(live.id);
    await this.limiter.remove(live.id);
    const reason = oom ?? (await deathReason(live.dir, exit));
    this.rows.update(live.id, { state: 'dead', reason, pid: null, tier: 'running' });
    this.log.warn({ sandbox: live.id, reason }, 'sandbox died');
    await keepConsoleLog(this.opts.paths.home, live.id, live.dir).catch(() => undefined);
    await removeLeftovers(live.dir).catch((e: unknown) =>
      this.log.error({ sandbox: live.id, err: e }, 'could not clean up a dead sandbox'),
    );
  }

  /** Why a QEMU that died was killed by the host at its memory limit, if it was. */
  private async oomReason(id: string): Promise<string | undefined> {
    const usage = await this.limiter.usage(id).catch(() => undefined);
    if (!usage?.oomKills) return undefined;
    const limit = this.rows.get(id)?.limits?.memory_bytes;
    const at = limit ? ` of ${formatSize(limit)}` : '';
    return `out of memory: its QEMU reached the memory limit${at} (limits.memory) and the host's OOM killer ended it; give it a larger limit or less guest RAM`;
  }

  private prune(): void {
    const before = new Date(Date.now() - (this.opts.retainEndedMs ?? 24 * 3600 * 1000));
    const n = this.rows.pruneEnded(before.toISOString());
    if (n > 0) this.log.info({ count: n }, 'forgot ended sandboxes');
    void forgetLogs(this.opts.paths.home, (id) => this.rows.get(id) !== undefined).catch(
      () => undefined,
    );
  }

  /** The REST shape of a row, with its network while it runs. */
  private wire(row: SandboxRow): SandboxT {
    const wire = toWire(row);
    if (row.state === 'running' || row.state === 'starting') {
      wire.idle = idleWire(row.idle, this.idleDefaults);
    }
    const net = this.opts.network;
    const mode = net?.modeOf(row.id);
    if (net && mode && (row.state === 'running' || row.state === 'starting')) {
      wire.network = { mode, egress: net.egressOf(row.id) ?? OPEN_EGRESS };
    }
    if (this.hostEnforcement && (row.state === 'running' || row.state === 'starting')) {
      const ask = askOf(mode ?? 'none', wire.network?.egress ?? OPEN_EGRESS);
      wire.unenforced = unenforcedOf(ask, this.hostEnforcement).map((u) => u.what);
    }
    return wire;
  }

  /**
   * What this host enforces (network mode, cgroups, QEMU's own uid), gathered once: the
   * basis of every sandbox's `unenforced`.
   */
  private async enforcement(): Promise<HostEnforcement> {
    const limits = await this.limiter.enforcement();
    this.hostEnforcement = {
      network: this.opts.network?.mode ?? 'off',
      limits: limits.version === null ? limits.reason : null,
      confineUser: vmm().confinement.enabled() && vmm().confinement.ownUser(),
      confineOff: !vmm().confinement.enabled(),
    };
    return this.hostEnforcement;
  }

  /** Refuse a sandbox this host cannot hold to what it asks (unless the daemon accepts it). */
  private async checkEnforcement(mode: 'nat' | 'none', egress: Egress): Promise<void> {
    const host = await this.enforcement();
    checkEnforcement(askOf(mode, egress), host, this.opts.acceptUnenforced ?? false);
  }

  private row(id: string): SandboxRow {
    const row = this.rows.get(id);
    if (row) return row;
    throw new ForkdError('sandbox_not_found', `no sandbox ${id}: list them with \`forkd ps\``, {
      id,
    });
  }

  private running(id: string): Live {
    const live = this.live.get(id);
    if (live && !this.ending.has(id)) return live;
    throw notRunning(this.row(id));
  }

  private async execOf(id: string, execId: string): Promise<ExecHandle> {
    const handle = (await this.awake(id)).execs.get(execId);
    if (handle) return handle;
    throw new ForkdError(
      'exec_not_found',
      `no running command ${execId} in sandbox ${id}: it finished, or never existed`,
      { id, exec_id: execId },
    );
  }
}

function expiry(timeoutS: number): string {
  return new Date(Date.now() + timeoutS * 1000).toISOString();
}

function notRunning(row: SandboxRow): ForkdError {
  const why =
    row.state === 'starting'
      ? 'is still starting; retry in a few seconds'
      : `has ${row.state === 'dead' ? 'died' : 'stopped'}${row.reason ? ` (${row.reason})` : ''}; create a new one`;
  return new ForkdError('sandbox_not_running', `sandbox ${row.id} ${why}`, {
    id: row.id,
    state: row.state,
  });
}

async function deathReason(dir: string, exit: VmExit): Promise<string> {
  const how =
    exit.signal !== null
      ? `killed by ${exit.signal}`
      : exit.code !== null
        ? `exit code ${exit.code}`
        : 'no status';
  const last = await lastConsoleLine(vmm().filesOf(dir).console);
  return `QEMU exited on its own (${how})${last ? `; last console line: ${last}` : ''}`;
}

/** What a boot from an image asks of the network. */
interface NetRequest {
  mode: NetworkModeT;
  egress?: EgressPolicyT;
}

/** The REST shape of a row (env stays in the daemon: it may hold secrets). */
export function toWire(row: SandboxRow): SandboxT {
  const wire: SandboxT = {
    id: row.id,
    state: row.state,
    image: row.image,
    snapshot: row.snapshot,
    parent: row.parent,
    memory_mib: row.memory_mib,
    cpus: row.cpus,
    labels: row.labels,
    created_at: row.created_at,
    expires_at: row.expires_at,
    pid: row.pid,
  };
  if (row.reason !== null) wire.reason = row.reason;
  // A running sandbox with a reason is one whose disk chain a repair could not mend.
  if (row.disk_problem !== null && row.state === 'running') wire.reason = row.disk_problem;
  if (row.limits) wire.limits = { ...row.limits };
  wire.tier = row.tier;
  return wire;
}

function toWireUsage(u: CgroupUsage): NonNullable<SandboxT['usage']> {
  return {
    cpu_seconds: u.cpuSeconds,
    memory_bytes: u.memoryBytes,
    throttled_seconds: u.throttledSeconds,
    oom_kills: u.oomKills,
  };
}

/** What a sandbox asks the host to enforce: its NIC, and whether its policy names hosts. */
function askOf(mode: 'nat' | 'none', egress: Egress) {
  return { network: mode, namesHosts: egressRules(egress, []).steerPorts.length > 0 };
}
