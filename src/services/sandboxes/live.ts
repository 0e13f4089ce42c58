/**
 * The live table of the sandbox service: the store's rows, and the sandboxes this process
 * holds (awake or paused) with the ones being ended. The other parts of the service
 * (lifecycle, idle tiers, guest I/O) find a sandbox here and nowhere else, so "not found"
 * and "not running" mean the same in every call.
 */
import type { AgentClient, ExecHandle } from '../../drivers/agent/client.js';
import type { VmHandle } from '../../drivers/vmm.js';
import { ForkdError } from '../../errors.js';
import type { SandboxRow, SandboxRows } from '../../store/sandboxes.js';
import type { ExecDefaults } from '../images/index.js';
import type { ExpiryTimers } from './expiry.js';
import { tieredStart, type Tiered } from './tiers.js';

/** A running sandbox as this process holds it (awake or paused: tiers.ts). */
export interface Live extends Tiered {
  readonly row: Pick<SandboxRow, 'memory_mib' | 'cpus' | 'image'>;
  dir: string;
  /** Streaming execs by exec id, until they exit. */
  execs: Map<string, ExecHandle>;
  /** Its image's WorkingDir and User, read at its first command. */
  execDefaults?: Promise<ExecDefaults>;
}

/** A sandbox that is not hibernated: its QEMU and agent session are there. */
export type AwakeLive = Live & { vm: VmHandle; agent: AgentClient };

export class LiveTable {
  private readonly held = new Map<string, Live>();
  /** Sandboxes being ended, so concurrent callers share one ending. */
  readonly ending = new Map<string, Promise<void>>();

  constructor(
    readonly rows: SandboxRows,
    readonly timers: ExpiryTimers,
  ) {}

  /** A sandbox's row (`sandbox_not_found` when there is none). */
  row(id: string): SandboxRow {
    const row = this.rows.get(id);
    if (row) return row;
    throw new ForkdError('sandbox_not_found', `no sandbox ${id}: list them with \`forkd ps\``, {
      id,
    });
  }

  /** A held sandbox not being ended (`sandbox_not_running` otherwise). */
  running(id: string): Live {
    const live = this.held.get(id);
    if (live && !this.ending.has(id)) return live;
    throw notRunning(this.row(id));
  }

  /** The row of a sandbox that may still change: starting or running (`sandbox_not_running` otherwise). */
  active(id: string): SandboxRow {
    const row = this.row(id);
    if (row.state !== 'starting' && row.state !== 'running') throw notRunning(row);
    return row;
  }

  get(id: string): Live | undefined {
    return this.held.get(id);
  }

  all(): Live[] {
    return [...this.held.values()];
  }

  /** Hold a sandbox (a hibernated one has no QEMU yet) and arm its timeout. */
  hold(row: SandboxRow): Live {
    const live: Live = {
      id: row.id,
      dir: row.dir,
      row: { memory_mib: row.memory_mib, cpus: row.cpus, image: row.image },
      vm: undefined,
      agent: undefined,
      execs: new Map(),
      ...tieredStart(row.tier),
    };
    this.held.set(row.id, live);
    this.timers.arm(row.id, row.expires_at);
    return live;
  }

  /**
   * Hold its timeout (a pause that asks for it: E2B's): the seconds left of it are kept, its
   * deadline cleared and its timer off, until `giveTimeoutBack`. One with no timeout, or
   * one held already, is left as it is.
   */
  holdTimeout(id: string): void {
    const { expires_at: at } = this.row(id);
    if (at === null) return;
    const left = Math.max(1, Math.ceil((Date.parse(at) - Date.now()) / 1000));
    this.timers.clear(id);
    this.rows.update(id, { expires_at: null, timeout_held_s: left });
  }

  /** Its wake: a held timeout runs again, what was left of it counted from now. */
  giveTimeoutBack(id: string): void {
    const held = this.rows.get(id)?.timeout_held_s;
    if (held === undefined || held === null) return;
    const row = this.rows.update(id, { expires_at: expiry(held), timeout_held_s: null });
    if (row && this.held.has(id)) this.timers.arm(id, row.expires_at);
  }

  /** Let go of a sandbox (ended, or died): its timeout goes with it. */
  drop(id: string): void {
    this.held.delete(id);
    this.timers.clear(id);
  }

  /** Let go of every sandbox without ending it (the daemon's shutdown). */
  dropAll(): void {
    this.timers.clearAll();
    this.held.clear();
  }

  /** Ids of the starting and running rows `which` picks. */
  activeIds(which: (row: SandboxRow) => boolean): string[] {
    return this.rows
      .active()
      .filter(which)
      .map((r) => r.id);
  }
}

export function notRunning(row: SandboxRow): ForkdError {
  const why =
    row.state === 'starting'
      ? 'is still starting; retry in a few seconds'
      : `has ${row.state === 'dead' ? 'died' : 'stopped'}${row.reason ? ` (${row.reason})` : ''}; create a new one`;
  return new ForkdError('sandbox_not_running', `sandbox ${row.id} ${why}`, {
    id: row.id,
    state: row.state,
  });
}

/** An ISO deadline `timeoutS` from now. */
export function expiry(timeoutS: number): string {
  return new Date(Date.now() + timeoutS * 1000).toISOString();
}
