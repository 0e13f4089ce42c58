/**
 * How a sandbox comes to run: a `starting` row first (so a crash mid-boot is found again),
 * then its VM, booted from an image or started by a fork's starter, then `running` and held.
 * Boots pass the boot gate (a cap on boots at once: `capacity` past it; the wake of a
 * halted sandbox passes the same one); forks do not, a restore costs a fraction of a boot.
 * A kill during the start aborts it.
 */
import type {
  CreateSandboxT,
  EgressPolicyT,
  NetworkModeT,
  SandboxT,
} from '../../contract/schemas.js';
import type { VmHandle } from '../../drivers/vmm.js';
import { ForkdError } from '../../errors.js';
import type { SandboxRow, StoredIdle } from '../../store/sandboxes.js';
import type { Caller } from '../contracts.js';
import { asDiskFull, refuseWhenFull } from '../disk-full.js';
import { DEFAULT_IMAGE, getImage } from '../images/index.js';
import { mergeEgress, OPEN_EGRESS } from '../network/policy.js';
import type { Endings } from './ending.js';
import type { Gate } from './gate.js';
import { forwardCallerPorts, leaseCallerNetns, type CallerNetns } from './caller-netns.js';
import type { ForkInit, SandboxStarter } from './host.js';
import { expiry } from './live.js';
import type { SandboxParts } from './parts.js';
import {
  bootSandbox,
  destroySandbox,
  newSandboxId,
  resolveResources,
  sandboxDir,
  type Sandbox,
} from './sandbox.js';
import type { SandboxViews } from './wire.js';

/** A boot in progress, so a kill can abort it. */
interface Booting {
  abort: AbortController;
  done: Promise<unknown>;
}

/** What a sandbox's `starting` row is made from, for a boot or a fork. */
type StartingInit = Omit<ForkInit, 'snapshot'> & { snapshot: string | null };

/** What a boot from an image asks of the network: a namespace of forkd's, or the caller's. */
interface NetRequest extends CallerNetns {
  mode: NetworkModeT;
  egress?: EgressPolicyT;
}

export interface StartOptions {
  /** The daemon's boot gate (gate.ts `bootGate`), shared with the wake of a halted sandbox. */
  gate: Gate;
  /** How long a boot may wait for the guest agent (default 60 s). */
  bootTimeoutMs?: number;
}

export class Starts {
  private readonly booting = new Map<string, Booting>();

  constructor(
    private readonly p: SandboxParts,
    private readonly endings: Endings,
    private readonly views: SandboxViews,
    private readonly opts: StartOptions,
  ) {}

  /** A real boot of the image's kernel: `cold`, or no boot snapshot to be had. */
  bootImage(req: CreateSandboxT, idle: StoredIdle | null, caller: Caller): Promise<SandboxT> {
    return this.opts.gate.around(async () => {
      const { paths, limiter } = this.p;
      const res = resolveResources({ memoryMiB: req.memory_mib, cpus: req.cpus });
      const image = req.image ?? DEFAULT_IMAGE;
      await getImage(paths, image); // image_not_found before anything exists
      const limits = await limiter.resolve(req.limits, res);
      const { netns, forward_ports } = req;
      const net = { mode: req.network ?? 'nat', egress: req.egress, netns, forward_ports } as const;
      await this.views.check(net.mode, mergeEgress(OPEN_EGRESS, req.egress));
      await refuseWhenFull(paths.sandboxes, `create from ${image}`);
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
      const row = await this.start(starting, req.timeout_s, undefined, net).catch(async (e) => {
        throw await asDiskFull(e, paths.sandboxes, `create from ${image}`);
      });
      this.p.log.info(
        { sandbox: row.id, principal: caller.principal, pid: row.pid },
        'sandbox created',
      );
      return this.views.wire(row);
    });
  }

  /** Bring up a sandbox from a snapshot: its row (with the snapshot's resources), then `start`. */
  async fork(init: ForkInit, start: SandboxStarter, caller: Caller): Promise<SandboxT> {
    await this.views.check(init.network ?? 'none', init.egress ?? OPEN_EGRESS);
    const starting = this.insertStarting(init);
    const row = await this.start(starting, init.timeoutS, start);
    this.p.log.info(
      { sandbox: row.id, snapshot: init.snapshot, principal: caller.principal },
      'sandbox forked',
    );
    return this.views.wire(row);
  }

  /** Abort a start under way (true), waiting for it and its row update to settle. */
  async abort(id: string): Promise<boolean> {
    const booting = this.booting.get(id);
    if (!booting) return false;
    booting.abort.abort(new ForkdError('sandbox_not_running', 'killed while starting'));
    await booting.done;
    return true;
  }

  /** The `starting` row a boot or a fork begins with (so a crash mid-way finds it). */
  private insertStarting(init: StartingInit): SandboxRow {
    const id = init.id ?? newSandboxId();
    return this.p.table.rows.insert({
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
      dir: sandboxDir(this.p.paths, id),
      reason: null,
      limits: init.limits ?? null,
      idle: init.idle ?? null,
    });
  }

  /** Start a `starting` row's VM; on failure the row goes (or, when killed meanwhile, says so). */
  private async start(
    starting: SandboxRow,
    timeoutS: number | undefined,
    start?: SandboxStarter,
    net: NetRequest = { mode: 'none' },
  ): Promise<SandboxRow> {
    const { id } = starting;
    const abort = new AbortController();
    const onStarted = (vm: VmHandle) => this.p.table.rows.update(id, { pid: vm.pid });
    const boot = start
      ? start({ id, env: starting.env, signal: abort.signal, onStarted })
      : this.boot(starting, net, abort.signal, onStarted);
    const settled = this.settle(starting, boot, abort.signal, timeoutS);
    // A kill waits for all of it, row update included, before it returns.
    this.booting.set(id, { abort, done: settled.catch(() => undefined) });
    try {
      return await settled;
    } finally {
      this.booting.delete(id);
    }
  }

  /**
   * Boot from an image, with its NIC and policy in place before QEMU starts (in the caller's
   * namespace when it names one, its ports forwarded once the guest runs).
   */
  private async boot(
    starting: SandboxRow,
    net: NetRequest,
    signal: AbortSignal,
    onStarted: (vm: VmHandle) => void,
  ): Promise<Sandbox> {
    const { id } = starting;
    const egress = mergeEgress(OPEN_EGRESS, net.egress);
    const { network } = this.p;
    const vmNet = net.netns
      ? await leaseCallerNetns(network, id, net.netns)
      : await network?.lease(id, net.mode, egress);
    const sb = await bootSandbox(this.p.paths, {
      id,
      image: starting.image as string,
      memoryMiB: starting.memory_mib,
      cpus: starting.cpus,
      env: starting.env,
      bootTimeoutMs: this.opts.bootTimeoutMs,
      signal,
      onStarted,
      // A booting sandbox's QEMU joins its cgroup (a row from before limits has none).
      onSpawn: async (pid) => {
        if (starting.limits) await this.p.limiter.place(id, starting.limits, pid);
      },
      net: vmNet,
    });
    await forwardCallerPorts(sb, net.forward_ports);
    return sb;
  }

  private async settle(
    starting: SandboxRow,
    boot: Promise<Sandbox>,
    aborted: AbortSignal,
    timeoutS: number | undefined,
  ): Promise<SandboxRow> {
    const { id } = starting;
    const { rows } = this.p.table;
    try {
      const sb = await boot;
      if (aborted.aborted) {
        await destroySandbox(sb); // killed in the instant between the boot's end and now
        throw aborted.reason;
      }
      const row = rows.update(id, {
        state: 'running',
        pid: sb.vm.pid,
        expires_at: this.runningExpiry(id, starting.expires_at, timeoutS),
      }) as SandboxRow;
      this.endings.register(row, sb.vm, sb.agent);
      return row;
    } catch (e) {
      await this.p.network?.release(id);
      await this.p.limiter.remove(id); // its QEMU is gone: the boot or fork ended it
      if (!aborted.aborted) {
        rows.delete(id);
        throw e;
      }
      rows.update(id, { state: 'stopped', reason: 'killed', pid: null });
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
    const current = this.p.table.rows.get(id)?.expires_at ?? null;
    if (timeoutS === undefined || current !== provisional) return current;
    return expiry(timeoutS);
  }
}
