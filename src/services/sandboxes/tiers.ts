/**
 * Idle tiers of a sandbox (docs/idle.md): pause it (QMP `stop`: its vCPUs use no CPU,
 * memory and devices stay), hibernate it (captured to disk, its QEMU ended: hibernate.ts)
 * and wake it (`cont`, or a restore from disk; then the guest's wall clock is pushed to the
 * host's, since the guest's clock stood still meanwhile); halt it (only its disk kept: its
 * QEMU ends, a wake boots it cold on that disk: halt.ts). Moves of one sandbox run one
 * after another, so a wake racing a pause always ends awake.
 */
import type { AgentClient } from '../../drivers/agent/client.js';
import { ForkdError } from '../../errors.js';
import type { SandboxTier, StoredIdle } from '../../store/sandboxes.js';
import type { CpuTimes, VmHandle } from '../../drivers/vmm.js';

export type { SandboxTier } from '../../store/sandboxes.js';

/** The part of a sandbox its tier moves touch. */
export interface Tiered {
  readonly id: string;
  /** Its QEMU and agent session; none while it is hibernated or halted. */
  vm: VmHandle | undefined;
  agent: AgentClient | undefined;
  tier: SandboxTier;
  /** When a request last reached it (ms since the epoch), for the idle policy. */
  lastUsed: number;
  /** The tail of its queue of moves, and how many are queued. */
  turn: Promise<unknown>;
  queued: number;
  /** Requests under way (commands, uploads, attached terminals): it is not idle meanwhile. */
  busy: number;
  /**
   * Connections open through its published ports: it is not idle meanwhile either, but a
   * hibernation asked for ends them (they are not the caller's own requests).
   */
  connections: number;
  /**
   * Its QEMU's CPU demand when the sweep first saw it after its last request: the idle
   * policy pauses only a guest that stayed quiet since (a job it runs keeps it awake).
   */
  quiet?: CpuMark;
}

/** The CPU a QEMU's threads used so far (ran, waited runnable), at a moment (ms). */
export interface CpuMark extends CpuTimes {
  at: number;
}

/**
 * Above this share of a core run since its last request, a guest is working, not idle (a
 * build, a training loop, a server under load it started itself); idle, its QEMU runs a few
 * hundredths of a core (0.014–0.05 at load 12–27 on 2 cores).
 */
export const BUSY_GUEST_SHARE = 0.5;

/**
 * Runnable (ran or waited for a core) this share of the time, a thread has a job: a busy
 * guest's vCPU thread is runnable all the time however crowded the host (0.999–1.0 measured
 * at load 12–40), an idle guest's busiest thread only at its wakeups (0.25–0.5 there).
 */
export const ALWAYS_RUNNABLE = 0.9;

/**
 * Whether a guest worked on its own since `mark`, so the idle policy leaves it awake and
 * counts it as used now: its QEMU ran more than BUSY_GUEST_SHARE of a core, or one of its
 * threads was runnable nearly all the time (a guest whose job gets little CPU on a crowded
 * host). The time an idle guest's threads wait for a core is not work: each of its timer
 * ticks waits behind every runnable task, and summed over its threads that wait passed half
 * a core from load 15 on (bench/results/idle-quiet-2026-12-04.txt), so it was never paused.
 */
export function guestWorked(mark: CpuMark, now: CpuMark): boolean {
  const secs = (now.at - mark.at) / 1000;
  if (secs <= 0) return false;
  if ((now.ranS - mark.ranS) / secs > BUSY_GUEST_SHARE) return true;
  return Object.entries(now.runnableS).some(([tid, s]) => {
    const was = mark.runnableS[tid];
    return was !== undefined && (s - was) / secs > ALWAYS_RUNNABLE;
  });
}

/** How a sandbox goes to disk and comes back (the service's: it owns files, network, cgroup). */
export interface DiskMoves {
  /** Capture it (running or paused) to disk and end its QEMU: `vm` and `agent` go. */
  hibernate(sb: Tiered): Promise<void>;
  /** A new QEMU restored from its capture, running, clock pushed: `vm` and `agent` set. */
  restore(sb: Tiered): Promise<void>;
  /** Sync its guest's disk and end its QEMU (or drop its capture): only its disk is kept. */
  halt(sb: Tiered): Promise<void>;
  /** A new QEMU booted cold on its disk, running: `vm` and `agent` set. */
  reboot(sb: Tiered): Promise<void>;
}

/** The tiers with no QEMU: a wake starts a new one (a restore, or a cold boot). */
export function onDisk(tier: SandboxTier): boolean {
  return tier === 'hibernated' || tier === 'halted';
}

/** A Tiered's starting fields. */
export function tieredStart(
  tier: SandboxTier,
): Pick<Tiered, 'tier' | 'lastUsed' | 'turn' | 'queued' | 'busy' | 'connections'> {
  return {
    tier,
    lastUsed: Date.now(),
    turn: Promise.resolve(),
    queued: 0,
    busy: 0,
    connections: 0,
  };
}

/** When the idle policy pauses a sandbox, in seconds without a request (null: never). */
export interface IdleAfter {
  pauseAfterS: number | null;
  hibernateAfterS: number | null;
}

/**
 * The daemon's idle policy unless told otherwise (docs/idle.md "The default policy"): a
 * minute without a request pauses a quiet sandbox (no CPU; the next request wakes it in
 * tens of ms), an hour hibernates it (no memory; a restore of ~0.2 s).
 */
export const DEFAULT_IDLE = { pauseAfterS: 60, hibernateAfterS: 3600 } as const;

/** A policy as asked for: a field left out takes the daemon's default; 0 or null is never. */
export interface IdleRequest {
  pause_after_s?: number | null;
  hibernate_after_s?: number | null;
}

/**
 * The policy a sandbox asked for, filled in from `base` (the daemon's defaults on a create
 * or fork; its policy now on a change), as stored (null fields: never); none asked for →
 * null (it follows the daemon's defaults, also those of a later daemon). Hibernation must
 * come after the pause: a request where it does not, with `base` filled in, is refused
 * before anything exists or changes; the message names where a time left out came from.
 */
export function resolveIdle(
  req: IdleRequest | undefined,
  base: IdleAfter,
  baseName = "the daemon's default",
): StoredIdle | null {
  if (req === undefined) return null;
  const pick = (asked: number | null | undefined, dflt: number | null) =>
    asked === undefined ? dflt : asked || null;
  const policy = {
    pause_after_s: pick(req.pause_after_s, base.pauseAfterS),
    hibernate_after_s: pick(req.hibernate_after_s, base.hibernateAfterS),
  };
  const { pause_after_s: p, hibernate_after_s: h } = policy;
  if (p !== null && h !== null && h <= p) {
    const whose = (asked: unknown) => (asked === undefined ? ` (${baseName})` : '');
    throw new ForkdError(
      'bad_request',
      `idle.hibernate_after_s ${h}${whose(req.hibernate_after_s)} must be larger than idle.pause_after_s ${p}${whose(req.pause_after_s)}: a sandbox is paused first, hibernated later; give both, or 0 for never`,
      { field: 'idle', pause_after_s: p, hibernate_after_s: h },
    );
  }
  return policy;
}

/**
 * A running sandbox's new policy (PATCH): the times asked for, the others as it has them
 * now (its own, or the daemon's defaults it follows); refused as `resolveIdle` refuses.
 */
export function changeIdle(
  own: StoredIdle | null | undefined,
  req: IdleRequest,
  defaults: IdleAfter,
): StoredIdle {
  const whose = own ? 'its current policy' : "the daemon's default";
  return resolveIdle(req, idleAfterOf(own, defaults), whose) as StoredIdle;
}

/** The times a sandbox is paused at: its own policy, else the daemon's defaults. */
export function idleAfterOf(own: StoredIdle | null | undefined, defaults: IdleAfter): IdleAfter {
  if (!own) return defaults;
  return { pauseAfterS: own.pause_after_s, hibernateAfterS: own.hibernate_after_s };
}

/** A sandbox's policy as the REST `Sandbox.idle` shows it (null: never). */
export function idleWire(
  own: StoredIdle | null | undefined,
  defaults: IdleAfter,
): {
  pause_after_s: number | null;
  hibernate_after_s: number | null;
  source: 'sandbox' | 'daemon';
} {
  const { pauseAfterS, hibernateAfterS } = idleAfterOf(own, defaults);
  return {
    pause_after_s: pauseAfterS,
    hibernate_after_s: hibernateAfterS,
    source: own ? 'sandbox' : 'daemon',
  };
}

/**
 * Where the idle policy moves it now, if anywhere: nothing under way and no request for
 * `hibernateAfterS` seconds → hibernated (from running or paused), else for `pauseAfterS`
 * → paused (from running). Both count from its last request.
 */
export function idleMove(sb: Tiered, after: IdleAfter, now: number): SandboxTier | null {
  if (onDisk(sb.tier) || sb.queued > 0 || sb.busy > 0 || sb.connections > 0) {
    return null;
  }
  const idleMs = now - sb.lastUsed;
  const { pauseAfterS, hibernateAfterS } = after;
  if (hibernateAfterS !== null && idleMs >= hibernateAfterS * 1000) return 'hibernated';
  if (pauseAfterS !== null && sb.tier === 'running' && idleMs >= pauseAfterS * 1000) {
    return 'paused';
  }
  return null;
}

/** Count a connection as open until the returned (idempotent) release; then it was the last use. */
export function holdConnection(sb: Tiered): () => void {
  sb.connections++;
  let released = false;
  return () => {
    if (released) return;
    released = true;
    sb.connections--;
    sb.lastUsed = Date.now();
  };
}

/** Count `p` as a request under way until it settles (then it counts as the last use). */
export function busyWhile<T>(sb: Tiered, p: Promise<T>): Promise<T> {
  sb.busy++;
  return p.finally(() => {
    sb.busy--;
    sb.lastUsed = Date.now();
  });
}

/**
 * Move a sandbox to `to` after the moves queued before; `onMoved` records the tier (the
 * store) once it is there. A move to where it already is does nothing.
 */
export function moveTo(
  sb: Tiered,
  to: SandboxTier,
  disk: DiskMoves,
  onMoved: (tier: SandboxTier) => void,
): Promise<void> {
  sb.queued++;
  const move = sb.turn.then(async () => {
    if (sb.tier === to) return;
    await step(sb, to, disk);
    sb.tier = to;
    onMoved(to);
  });
  const settled = move.finally(() => sb.queued--);
  sb.turn = settled.catch(() => undefined);
  return settled;
}

async function step(sb: Tiered, to: SandboxTier, disk: DiskMoves): Promise<void> {
  if (to === 'hibernated') return disk.hibernate(sb);
  if (to === 'halted') return disk.halt(sb);
  if (onDisk(sb.tier)) {
    // comes up running, its clock pushed (a cold boot sets it)
    await (sb.tier === 'halted' ? disk.reboot(sb) : disk.restore(sb));
    if (to === 'paused') await liveVm(sb).pause();
    return;
  }
  if (to === 'paused') return liveVm(sb).pause();
  await wakeGuest(liveVm(sb), sb.agent as AgentClient);
}

/** Its QEMU; a sandbox that is not hibernated or halted always has one. */
export function liveVm(sb: Tiered): VmHandle {
  if (sb.vm) return sb.vm;
  throw new ForkdError('internal', `sandbox ${sb.id} has no QEMU (tier ${sb.tier})`, {
    id: sb.id,
  });
}

/** Whether a request must wait for a move (it is paused, or a move is under way). */
export function needsWake(sb: Tiered): boolean {
  return sb.tier !== 'running' || sb.queued > 0;
}

/** Run a stopped guest again and set its wall clock to the host's (it stood still). */
async function wakeGuest(vm: VmHandle, agent: AgentClient): Promise<void> {
  await vm.resume();
  await agent.configure({ timeMs: Date.now() });
}
