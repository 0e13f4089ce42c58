/**
 * The idle-tier bookkeeping (src/services/sandboxes/tiers.ts) over a stand-in VM and
 * agent: moves of one sandbox run in order and a wake racing a pause ends awake, a wake
 * pushes the guest clock, a hibernated one is restored (and a move to hibernated captures
 * it from running or paused), and the idle policy pauses only a sandbox with nothing under
 * way after its time, hibernating it once its hibernate-after time has passed. A sandbox's
 * own policy is filled in from the daemon's defaults, 0 or null meaning never, and refused
 * when its hibernation would not come after its pause. A halted one boots cold on its wake
 * and is never paused by the idle policy.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AgentClient } from '../../../src/drivers/agent/client.js';
import type { Vm } from '../../../src/drivers/qemu/vm.js';
import {
  busyWhile,
  changeIdle,
  holdConnection,
  idleAfterOf,
  guestWorked,
  idleMove,
  moveTo,
  needsWake,
  tieredStart,
  resolveIdle,
  type DiskMoves,
  type IdleAfter,
  type Tiered,
  type SandboxTier,
} from '../../../src/services/sandboxes/tiers.js';

/** Disk moves that only record what they were asked (the e2e tests do the real ones). */
function diskLog(log: string[]): DiskMoves {
  let ended: Tiered['vm'];
  return {
    hibernate: async (sb) => {
      log.push(`capture from ${sb.tier}`);
      [ended, sb.vm] = [sb.vm, undefined];
    },
    restore: async (sb) => {
      log.push('restore');
      sb.vm = ended; // stands in for the new QEMU
    },
    halt: async (sb) => {
      log.push(`halt from ${sb.tier}`);
      [ended, sb.vm] = [sb.vm ?? ended, undefined];
    },
    reboot: async (sb) => {
      log.push('cold boot');
      sb.vm = ended;
    },
  };
}

function standIn(): { sb: Tiered; log: string[] } {
  const log: string[] = [];
  const vm = {
    pause: async () => void log.push('stop'),
    resume: async () => void log.push('cont'),
  } as unknown as Vm;
  const agent = {
    configure: async (c: { timeMs?: number }) => void log.push(`clock ${typeof c.timeMs}`),
  } as unknown as AgentClient;
  return { sb: { id: 'sbx-1', vm, agent, ...tieredStart('running') }, log };
}

test('a pause then a racing wake run in order and end awake, the clock pushed', async () => {
  const { sb, log } = standIn();
  const tiers: string[] = [];
  const disk = diskLog(log);
  const pause = moveTo(sb, 'paused', disk, (t) => tiers.push(t));
  assert.equal(needsWake(sb), true, 'a move under way: a request waits for it');
  await Promise.all([pause, moveTo(sb, 'running', disk, (t) => tiers.push(t))]);
  assert.deepEqual(log, ['stop', 'cont', 'clock number']);
  assert.deepEqual(tiers, ['paused', 'running']);
  assert.equal(needsWake(sb), false);
  await moveTo(sb, 'running', disk, () => assert.fail('a move to where it is does nothing'));
});

test('a failed move leaves the tier as it was and does not block the next', async () => {
  const { sb } = standIn();
  (sb.vm as unknown as { pause: () => Promise<void> }).pause = async () => {
    throw new Error('monitor gone');
  };
  await assert.rejects(
    moveTo(sb, 'paused', diskLog([]), () => undefined),
    /monitor gone/,
  );
  assert.equal(sb.tier, 'running');
  assert.equal(sb.queued, 0);
});

test('hibernation captures from running or paused; a wake restores it', async () => {
  const { sb, log } = standIn();
  const disk = diskLog(log);
  const tiers: SandboxTier[] = [];
  const record = (t: SandboxTier) => void tiers.push(t);
  await moveTo(sb, 'paused', disk, record);
  await moveTo(sb, 'hibernated', disk, record);
  assert.equal(sb.vm, undefined, 'no QEMU while hibernated');
  assert.equal(needsWake(sb), true);
  await moveTo(sb, 'running', disk, record);
  await moveTo(sb, 'hibernated', disk, record);
  await moveTo(sb, 'paused', disk, record);
  assert.deepEqual(log, [
    'stop',
    'capture from paused',
    'restore',
    'capture from running',
    'restore',
    'stop',
  ]);
  assert.deepEqual(tiers, ['paused', 'hibernated', 'running', 'hibernated', 'paused']);
});

test('the idle policy pauses a sandbox with nothing under way after its time', async () => {
  const { sb } = standIn();
  const t0 = sb.lastUsed;
  const after = (pauseAfterS: number | null, hibernateAfterS: number | null = null): IdleAfter => ({
    pauseAfterS,
    hibernateAfterS,
  });
  assert.equal(idleMove(sb, after(null), t0 + 1e9), null, 'null: never');
  assert.equal(idleMove(sb, after(10), t0 + 9_999), null);
  assert.equal(idleMove(sb, after(10), t0 + 10_000), 'paused');
  let finish!: () => void;
  const running = busyWhile(sb, new Promise<void>((r) => (finish = r)));
  assert.equal(idleMove(sb, after(10, 20), t0 + 60_000), null, 'a command under way');
  finish();
  await running;
  assert.ok(sb.lastUsed >= t0, 'its end counts as the last use');
  const release = holdConnection(sb);
  assert.equal(idleMove(sb, after(10, 20), t0 + 60_000), null, 'a published-port connection open');
  release();
  release(); // idempotent: counted once
  assert.equal(sb.connections, 0);
  const t1 = sb.lastUsed;
  assert.equal(idleMove(sb, after(10), t1 + 10_000), 'paused');
  assert.equal(idleMove(sb, after(10, 60), t1 + 59_999), 'paused', 'pause first');
  assert.equal(idleMove(sb, after(10, 60), t1 + 60_000), 'hibernated', 'skips paused when late');
  assert.equal(idleMove(sb, after(null, 60), t1 + 60_000), 'hibernated', 'hibernate alone');
  sb.tier = 'paused';
  assert.equal(idleMove(sb, after(10), t1 + 60_000), null, 'already paused');
  assert.equal(idleMove(sb, after(10, 60), t1 + 60_000), 'hibernated', 'paused → hibernated');
  sb.tier = 'hibernated';
  assert.equal(idleMove(sb, after(10, 60), t1 + 1e9), null, 'already hibernated');
});

test('a guest that ran more than half a core since its last request worked on its own', () => {
  const mark = { at: 0, ranS: 10, runnableS: { 1: 10 } };
  const at = (ranS: number) => ({ at: 60_000, ranS, runnableS: { 1: ranS } });
  assert.equal(guestWorked(mark, at(16)), false, '10 % of a core: idle ticks');
  assert.equal(guestWorked(mark, at(70)), true, 'a whole core: a job');
  assert.equal(guestWorked(mark, { ...at(11), at: 0 }), false, 'no time passed: nothing to tell');
});

test('on a crowded host waiting is no work, but a thread runnable all the time is', () => {
  // Measured at load 27 (bench/results/idle-quiet-2026-12-04.txt), over 10 s.
  const mark = { at: 0, ranS: 0, runnableS: { 1: 0, 2: 0, 3: 0 } };
  const idle = { at: 10_000, ranS: 0.49, runnableS: { 1: 4.44, 2: 0.65, 3: 0 } };
  assert.equal(guestWorked(mark, idle), false, 'idle: its threads waited 0.5 of a core');
  const busy = { at: 10_000, ranS: 2.36, runnableS: { 1: 9.99, 2: 5.37, 3: 0 } };
  assert.equal(guestWorked(mark, busy), true, 'a busy loop: its vCPU always runnable');
  const fresh = { ...busy, runnableS: { 4: 9.99 } };
  assert.equal(guestWorked(mark, fresh), false, 'a thread born since is not compared');
});

test("a sandbox's idle policy: the daemon's defaults fill what it leaves out; 0 and null are never", () => {
  const defaults: IdleAfter = { pauseAfterS: 60, hibernateAfterS: 900 };
  assert.equal(resolveIdle(undefined, defaults), null, 'none asked for: follows the daemon');
  assert.deepEqual(resolveIdle({}, defaults), { pause_after_s: 60, hibernate_after_s: 900 });
  assert.deepEqual(resolveIdle({ pause_after_s: 5 }, defaults), {
    pause_after_s: 5,
    hibernate_after_s: 900,
  });
  assert.deepEqual(resolveIdle({ pause_after_s: 0, hibernate_after_s: null }, defaults), {
    pause_after_s: null,
    hibernate_after_s: null,
  });
  // Hibernate only: no pause before it, so any time goes.
  assert.deepEqual(resolveIdle({ pause_after_s: 0, hibernate_after_s: 1 }, defaults), {
    pause_after_s: null,
    hibernate_after_s: 1,
  });
  const none: IdleAfter = { pauseAfterS: null, hibernateAfterS: null };
  assert.deepEqual(resolveIdle({ hibernate_after_s: 30 }, none), {
    pause_after_s: null,
    hibernate_after_s: 30,
  });
  assert.deepEqual(idleAfterOf(null, defaults), defaults, 'no policy of its own: the defaults');
  assert.deepEqual(idleAfterOf({ pause_after_s: 5, hibernate_after_s: null }, defaults), {
    pauseAfterS: 5,
    hibernateAfterS: null,
  });
});

test('an idle policy whose hibernation does not come after its pause is refused, naming why', () => {
  const defaults: IdleAfter = { pauseAfterS: null, hibernateAfterS: 300 };
  const refused = (req: Parameters<typeof resolveIdle>[0], message: RegExp) =>
    assert.throws(
      () => resolveIdle(req, defaults),
      (e: Error & { code?: string }) => e.code === 'bad_request' && message.test(e.message),
    );
  refused({ pause_after_s: 60, hibernate_after_s: 60 }, /hibernate_after_s 60 must be larger/);
  refused(
    { pause_after_s: 600 },
    /300 \(the daemon's default\) must be larger than idle\.pause_after_s 600/,
  );
});

test('a changed policy (PATCH) keeps the times left out as they are now; a bad order names its source', () => {
  const defaults: IdleAfter = { pauseAfterS: null, hibernateAfterS: 300 };
  const own = { pause_after_s: 60, hibernate_after_s: 900 };
  assert.deepEqual(changeIdle(own, { pause_after_s: 30 }, defaults), {
    pause_after_s: 30,
    hibernate_after_s: 900,
  });
  assert.deepEqual(changeIdle(own, { hibernate_after_s: 0 }, defaults), {
    pause_after_s: 60,
    hibernate_after_s: null,
  });
  // Following the daemon until now: its defaults are what is kept, and then its own.
  assert.deepEqual(changeIdle(null, { pause_after_s: 10 }, defaults), {
    pause_after_s: 10,
    hibernate_after_s: 300,
  });
  assert.deepEqual(changeIdle(null, {}, defaults), { pause_after_s: null, hibernate_after_s: 300 });
  const refused = (base: typeof own | null, req: { pause_after_s?: number }, message: RegExp) =>
    assert.throws(
      () => changeIdle(base, req, defaults),
      (e: Error & { code?: string }) => e.code === 'bad_request' && message.test(e.message),
    );
  refused(
    own,
    { pause_after_s: 900 },
    /900 \(its current policy\) must be larger than idle\.pause_after_s 900:/,
  );
  refused(null, { pause_after_s: 400 }, /300 \(the daemon's default\) must be larger/);
});

test('a halt from running or hibernated, its wake a cold boot; the idle policy leaves it halted', async () => {
  const { sb, log } = standIn();
  const disk = diskLog(log);
  await moveTo(sb, 'halted', disk, () => undefined);
  assert.equal(sb.vm, undefined);
  await moveTo(sb, 'paused', disk, () => undefined);
  await moveTo(sb, 'hibernated', disk, () => undefined);
  await moveTo(sb, 'halted', disk, () => undefined);
  await moveTo(sb, 'running', disk, () => undefined);
  assert.deepEqual(log, [
    'halt from running',
    'cold boot',
    'stop',
    'capture from paused',
    'halt from hibernated',
    'cold boot',
  ]);
  sb.tier = 'halted';
  sb.lastUsed = 0;
  assert.equal(idleMove(sb, { pauseAfterS: 1, hibernateAfterS: 2 }, Date.now()), null);
  assert.equal(needsWake(sb), true);
});
