/**
 * Idle tiers of a live sandbox (docs/idle.md): park it (QMP `stop`: its vCPUs use no CPU,
 * memory and devices stay) and wake it (`cont`, then the guest's wall clock is pushed to
 * the host's, since the guest's clock stood still while it was stopped). Moves of one
 * sandbox run one after another, so a wake racing a pause always ends awake.
 */
import type { AgentClient } from '../../drivers/agent/client.js';
import type { Vm } from '../../drivers/qemu/vm.js';

/** The tiers a live QEMU can be in (a hibernated sandbox has no QEMU). */
export type LiveTier = 'running' | 'paused';

/** The part of a live sandbox its tier moves touch. */
export interface Parkable {
  readonly id: string;
  readonly vm: Vm;
  readonly agent: AgentClient;
  tier: LiveTier;
  /** When a request last reached it (ms since the epoch), for the idle policy. */
  lastUsed: number;
  /** The tail of its queue of moves, and how many are queued. */
  turn: Promise<unknown>;
  queued: number;
}

/** A Parkable's starting fields. */
export function parkable(tier: LiveTier): Pick<Parkable, 'tier' | 'lastUsed' | 'turn' | 'queued'> {
  return { tier, lastUsed: Date.now(), turn: Promise.resolve(), queued: 0 };
}

/**
 * Move a live sandbox to `to` after the moves queued before; `onMoved` records the tier
 * (the store) once QEMU is there. A move to where it already is does nothing.
 */
export function moveTo(
  sb: Parkable,
  to: LiveTier,
  onMoved: (tier: LiveTier) => void,
): Promise<void> {
  sb.queued++;
  const move = sb.turn.then(async () => {
    if (sb.tier === to) return;
    if (to === 'paused') await sb.vm.pause();
    else await wakeGuest(sb.vm, sb.agent);
    sb.tier = to;
    onMoved(to);
  });
  const settled = move.finally(() => sb.queued--);
  sb.turn = settled.catch(() => undefined);
  return settled;
}

/** Whether a request must wait for a move (it is parked, or a move is under way). */
export function needsWake(sb: Parkable): boolean {
  return sb.tier !== 'running' || sb.queued > 0;
}

/** Run a stopped guest again and set its wall clock to the host's (it stood still). */
async function wakeGuest(vm: Vm, agent: AgentClient): Promise<void> {
  await vm.resume();
  await agent.configure({ timeMs: Date.now() });
}
