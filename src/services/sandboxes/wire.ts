/**
 * How the sandbox service shows sandboxes (their REST shape: row, idle policy, network
 * while it runs, what its QEMU uses now, what this host leaves unenforced; its console) and what it refuses to start because this
 * host cannot hold it to what it asks. Env stays in the daemon: it may hold secrets.
 */
import type { SandboxT } from '../../contract/schemas.js';
import type { SandboxUsageT } from '../contracts.js';
import type { CgroupUsage } from '../../drivers/host/cgroup.js';
import type { SandboxRow } from '../../store/sandboxes.js';
import { checkEnforcement, unenforcedOf, type HostEnforcement } from '../enforcement.js';
import { egressRules, OPEN_EGRESS, type Egress } from '../network/policy.js';
import { vmm } from '../vmm.js';
import { readTail } from './files.js';
import { keptLogPath } from './leftovers.js';
import type { SandboxParts } from './parts.js';
import { idleWire, type IdleAfter } from './tiers.js';

const CONSOLE_TAIL_BYTES = 1024 * 1024;

export class SandboxViews {
  private host: HostEnforcement | undefined;

  constructor(
    private readonly p: SandboxParts,
    private readonly opts: {
      idleDefaults: IdleAfter;
      /** Start what this host cannot enforce, reporting it (`--accept-unenforced`). */
      acceptUnenforced: boolean;
    },
  ) {}

  async list(filter: {
    state?: SandboxT['state'];
    label?: { key: string; value: string };
  }): Promise<SandboxT[]> {
    const { label } = filter;
    return this.p.table.rows
      .list(filter.state)
      .filter((r) => !label || r.labels[label.key] === label.value)
      .map((r) => this.wire(r));
  }

  /** One sandbox; a running one with what its QEMU uses now (its cgroup's numbers). */
  async get(id: string): Promise<SandboxT> {
    await this.enforcement();
    const wire = this.wire(this.p.table.row(id));
    const vm = this.p.table.get(id)?.vm;
    const usage = vm ? await this.p.limiter.usage(id) : undefined;
    if (usage) wire.usage = toWireUsage(usage);
    const confined = vm && (await vmm().confinement.of(vm.pid));
    if (confined) {
      const { uid, seccomp, sandbox, spawn, capabilities, namespaces } = confined;
      wire.confinement = { uid, seccomp, sandbox, spawn, capabilities, namespaces };
    }
    return wire;
  }

  /** Every running sandbox's limits and use, for /metrics. */
  async usage(): Promise<SandboxUsageT[]> {
    const all = await Promise.all(
      this.p.table
        .all()
        .filter((l) => l.vm)
        .map(async ({ id }) => {
          const usage = await this.p.limiter.usage(id).catch(() => undefined);
          const limits = this.p.table.rows.get(id)?.limits ?? null;
          return usage && { id, limits, ...toWireUsage(usage) };
        }),
    );
    return all.filter((u): u is SandboxUsageT => u !== undefined);
  }

  /** The last 1 MiB of the guest console; an ended sandbox's is kept until its row goes. */
  async consoleLog(id: string): Promise<string> {
    const row = this.p.table.row(id);
    const ended = row.state === 'stopped' || row.state === 'dead';
    const home = this.p.paths.home;
    const path = ended ? keptLogPath(home, id) : vmm().filesOf(row.dir).console;
    return readTail(path, CONSOLE_TAIL_BYTES);
  }

  /** The REST shape of a row, with its network while it runs. */
  wire(row: SandboxRow): SandboxT {
    const wire = toWire(row);
    const active = row.state === 'running' || row.state === 'starting';
    if (!active) return wire;
    wire.idle = idleWire(row.idle, this.opts.idleDefaults);
    const net = this.p.network;
    const mode = net?.modeOf(row.id);
    if (net && mode) wire.network = { mode, egress: net.egressOf(row.id) ?? OPEN_EGRESS };
    if (this.host) {
      const ask = askOf(mode ?? 'none', wire.network?.egress ?? OPEN_EGRESS);
      wire.unenforced = unenforcedOf(ask, this.host).map((u) => u.what);
    }
    return wire;
  }

  /**
   * What this host enforces (network mode, cgroups, QEMU's own uid), gathered once: the
   * basis of every sandbox's `unenforced`.
   */
  async enforcement(): Promise<HostEnforcement> {
    if (this.host) return this.host;
    const limits = await this.p.limiter.enforcement();
    this.host = {
      network: this.p.network?.mode ?? 'off',
      limits: limits.version === null ? limits.reason : null,
      confineUser: vmm().confinement.enabled() && vmm().confinement.ownUser(),
      confineOff: !vmm().confinement.enabled(),
    };
    return this.host;
  }

  /** Refuse a sandbox this host cannot hold to what it asks (unless the daemon accepts it). */
  async check(mode: 'nat' | 'none', egress: Egress): Promise<void> {
    const host = await this.enforcement();
    checkEnforcement(askOf(mode, egress), host, this.opts.acceptUnenforced);
  }
}

/** The REST shape of a row alone (no network, idle or enforcement). */
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

export function toWireUsage(u: CgroupUsage): NonNullable<SandboxT['usage']> {
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
