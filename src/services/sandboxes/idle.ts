/**
 * The idle tiers as the sandbox service runs them (docs/idle.md): every request wakes a
 * paused sandbox first (`awake`), a sweep each second pauses the ones nobody used for their
 * idle time whose guest stayed quiet, and a hibernation goes to disk and comes back with
 * its network, cgroup and published ports. tiers.ts holds the moves themselves and the
 * rules; hibernate.ts the capture and the restore; halt.ts the halt and the cold boot.
 */
import { ForkdError } from '../../errors.js';
import type { VmHandle } from '../../drivers/vmm.js';
import { OPEN_EGRESS } from '../network/policy.js';
import type { Endings } from './ending.js';
import type { Gate } from './gate.js';
import { Halts, readHalt } from './halt.js';
import {
  captureToDisk,
  readImage,
  restoreFromDisk,
  type DiskNet,
  type NetImage,
  type StartOnDisk,
} from './hibernate.js';
import type { AwakeLive, Live } from './live.js';
import type { SandboxParts } from './parts.js';
import {
  guestWorked,
  idleAfterOf,
  idleMove,
  liveVm,
  moveTo,
  needsWake,
  type CpuMark,
  type IdleAfter,
  type SandboxTier,
} from './tiers.js';
import { crashPoint } from '../../util/crash.js';

/** How often the idle policy looks for sandboxes to pause. */
const IDLE_SWEEP_MS = 1000;

export class IdleTiers {
  private timer: NodeJS.Timeout | undefined;
  private sweeping = false;
  private readonly halts: Halts;

  constructor(
    private readonly p: SandboxParts,
    private readonly endings: Endings,
    private readonly opts: {
      /** The daemon's idle times (`--pause-idle-after`, `--hibernate-idle-after`). */
      defaults: IdleAfter;
      /** How long a restore may wait for the guest agent. */
      agentTimeoutMs: number;
      /** The daemon's boot gate: a halted sandbox's wake is a cold boot and passes it. */
      bootGate: Gate;
    },
  ) {
    this.halts = new Halts(
      p,
      endings,
      {
        netImage: (id) => this.netImage(id),
        wakeOnDisk: (live, image, start) => this.wakeOnDisk(live, image, start),
      },
      { bootTimeoutMs: opts.agentTimeoutMs, gate: opts.bootGate },
    );
  }

  /** Sweep each second: a sandbox may have a policy of its own whatever the daemon's defaults. */
  start(): void {
    this.timer = setInterval(() => this.sweep(), IDLE_SWEEP_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /**
   * A running sandbox for a request: woken first when paused (transparently), marked used.
   * A timeout its pause held runs again from the wake.
   */
  async awake(id: string): Promise<AwakeLive> {
    const live = this.p.table.running(id);
    live.lastUsed = Date.now();
    if (needsWake(live)) {
      const from = live.tier;
      await this.move(live, 'running');
      live.lastUsed = Date.now(); // its idle time counts from the end of a wake (seconds from disk)
      this.p.table.giveTimeoutBack(id);
      this.p.log.info({ sandbox: id, from }, 'sandbox woken');
    }
    liveVm(live);
    return live as AwakeLive;
  }

  /**
   * Pause a running sandbox on request (a hibernation or a halt refuses while a stream is
   * under way; a halted sandbox is resumed before any other tier). With `holdTimeout` its
   * timeout stands still until its wake (held before the move, so it cannot expire during
   * a long one; given back if the move fails).
   */
  async pause(
    id: string,
    to: 'paused' | 'hibernated' | 'halted',
    holdTimeout = false,
  ): Promise<void> {
    const live = this.p.table.running(id);
    refuseFromHalted(live, to);
    if (to !== 'paused' && live.busy > 0) {
      throw new ForkdError(
        'bad_request',
        `sandbox ${id} has a command, upload or terminal under way: its stream would end with the QEMU; pause it, or hibernate or halt it once they are done`,
        { id, tier: to },
      );
    }
    if (!holdTimeout) return this.move(live, to);
    this.p.table.holdTimeout(id);
    await this.move(live, to).catch((e: unknown) => {
      if (live.tier === 'running') this.p.table.giveTimeoutBack(id);
      throw e;
    });
  }

  /** After a daemon restart a hibernated or halted sandbox's published ports listen again. */
  async holdOnDiskPorts(id: string, dir: string, tier: SandboxTier): Promise<void> {
    const network = this.p.network;
    if (!network) return;
    const read = tier === 'halted' ? readHalt : readImage;
    const image = await read(dir).catch(() => undefined);
    if (!image?.ports.length) return;
    await network.holdHibernated(
      id,
      image.nic ? 'nat' : 'none',
      image.egress ?? OPEN_EGRESS,
      image.ports,
    );
  }

  /** A new policy applies at once: a paused sandbox stays in its tier, its times count from now. */
  touched(id: string): void {
    const live = this.p.table.get(id);
    if (live) live.lastUsed = Date.now();
  }

  /**
   * Pause every sandbox nobody used for its pause- or hibernate-after time whose guest
   * stayed quiet meanwhile. One sweep at a time (each reads QEMUs' CPU time).
   */
  private sweep(): void {
    if (this.sweeping) return;
    this.sweeping = true;
    Promise.all(this.p.table.all().map((live) => this.pauseIfIdle(live)))
      .catch((e: unknown) => this.p.log.warn({ err: e }, 'idle sweep failed'))
      .finally(() => (this.sweeping = false));
  }

  private async pauseIfIdle(live: Live): Promise<void> {
    const { table, log } = this.p;
    const after = idleAfterOf(table.rows.get(live.id)?.idle, this.opts.defaults);
    if (after.pauseAfterS === null && after.hibernateAfterS === null) return;
    const running = live.tier === 'running';
    // QEMU's CPU is read once after each request (the mark) and when a move is due, not
    // every sweep: with the default policy every running sandbox is swept each second.
    if (running && (!live.quiet || live.quiet.at < live.lastUsed)) {
      const mark = await cpuMark(live);
      if (mark) {
        live.quiet = mark; // used since: its quiet time is measured from now on
        return;
      }
    }
    const to = table.ending.has(live.id) ? null : idleMove(live, after, Date.now());
    if (!to) return;
    const cpu = running ? await cpuMark(live) : undefined;
    if (cpu && live.quiet && guestWorked(live.quiet, cpu)) {
      live.lastUsed = Date.now(); // its own job keeps it awake, a full idle time more
      return;
    }
    log.info({ sandbox: live.id, tier: to, ...after }, 'pausing an idle sandbox');
    await this.move(live, to).catch((e: unknown) =>
      log.warn({ sandbox: live.id, tier: to, err: e }, 'could not pause an idle sandbox'),
    );
  }

  private move(live: Live, to: SandboxTier): Promise<void> {
    const moves = {
      hibernate: () => this.hibernate(live),
      restore: () => this.restore(live),
      halt: () => this.halts.halt(live),
      reboot: () => this.halts.reboot(live),
    };
    return moveTo(live, to, moves, (tier) => {
      this.p.table.rows.update(live.id, { tier, pid: live.vm?.pid ?? null });
    });
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
    this.p.table.rows.update(live.id, { tier: 'hibernated' });
    crashPoint('hibernate:recorded');
    // From here its QEMU's exit is ours, not a death (the endings compare the VM).
    live.vm = undefined;
    live.agent?.close();
    live.agent = undefined;
    await vm.kill();
    crashPoint('hibernate:ended');
    try {
      await staged.commit();
      const { image } = staged;
      this.p.log.info(
        { sandbox: live.id, memory_bytes: image.memory_bytes, pause_ms: image.pause_ms },
        'sandbox hibernated',
      );
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      // Not awaited: the ending waits for this move to settle first.
      void this.endings.end(live.id, 'dead', `its hibernation could not be written: ${why}`);
      throw e;
    }
    await this.p.network?.hibernate(live.id); // its published ports keep listening
    await this.p.limiter.remove(live.id);
  }

  /** The policy and published ports a wake puts back. */
  private async netImage(id: string): Promise<NetImage> {
    const net = this.p.network;
    if (!net?.modeOf(id)) return { ports: [] };
    const state = await net.state(id);
    return { egress: state.egress, ports: state.ports };
  }

  /** A hibernated sandbox back under its id: a QEMU restored from its capture. */
  private async restore(live: Live): Promise<void> {
    const image = await readImage(live.dir);
    await this.wakeOnDisk(live, image, (net, onSpawn) =>
      restoreFromDisk(image, {
        dir: live.dir,
        memoryMiB: live.row.memory_mib,
        cpus: live.row.cpus,
        net,
        onSpawn,
        agentTimeoutMs: this.opts.agentTimeoutMs,
      }),
    );
  }

  /**
   * A wake that starts a new QEMU for a sandbox kept on disk (hibernated or halted): a network
   * of its own again (the same NIC, policy and published host ports), its cgroup placed as
   * its QEMU spawns. On failure it stays on disk, its published ports still listening.
   */
  private async wakeOnDisk(live: Live, image: DiskNet, start: StartOnDisk): Promise<void> {
    const { network, limiter } = this.p;
    const limits = this.p.table.row(live.id).limits;
    const mode = image.nic ? 'nat' : 'none';
    const leased = network ? await network.lease(live.id, mode, image.egress) : undefined;
    const net = image.nic ? (leased ?? (image.restrict ? { restrict: true } : {})) : undefined;
    try {
      const { vm, agent } = await start(net, async (pid) => {
        if (limits) await limiter.place(live.id, limits, pid);
      });
      live.vm = vm;
      live.agent = agent;
      this.endings.watch(live, vm);
      await this.republish(live.id, vm, image);
    } catch (e) {
      const vm = live.vm;
      live.vm = undefined; // its exit is ours, not a death
      live.agent?.close();
      live.agent = undefined;
      await vm?.kill();
      await network?.hibernate(live.id); // still on disk: its ports keep listening
      await limiter.remove(live.id);
      throw e;
    }
  }

  /** Its published ports again, on the host ports they had (one taken meanwhile is logged). */
  private async republish(id: string, vm: VmHandle, image: NetImage): Promise<void> {
    const network = this.p.network;
    if (!network) return;
    if (image.egress) await network.enforce(id, image.egress);
    for (const p of image.ports) {
      await network
        .publish(id, vm, p.port, { hostPort: p.host_port, bind: p.host })
        .catch((e: unknown) =>
          this.p.log.warn({ sandbox: id, port: p.port, err: e }, 'could not publish a port again'),
        );
    }
  }
}

/** A halted sandbox has no memory to pause or capture: only a wake (or a halt) is asked of it. */
function refuseFromHalted(live: Live, to: SandboxTier): void {
  if (live.tier !== 'halted' || to === 'halted') return;
  throw new ForkdError(
    'bad_request',
    `sandbox ${live.id} is halted (only its disk is kept): resume it first (\`forkd resume ${live.id}\`, a cold boot), then pause it as ${to}`,
    { id: live.id, tier: live.tier },
  );
}

async function cpuMark(live: Live): Promise<CpuMark | undefined> {
  const times = await live.vm?.cpuTimes();
  return times && { at: Date.now(), ...times };
}
