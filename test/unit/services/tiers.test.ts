/**
 * The idle-tier bookkeeping (src/services/sandboxes/tiers.ts) over a stand-in VM and
 * agent: moves of one sandbox run in order and a wake racing a pause ends awake, a wake
 * pushes the guest clock, and the idle policy parks only an awake sandbox with nothing
 * under way after its time.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AgentClient } from '../../../src/drivers/agent/client.js';
import type { Vm } from '../../../src/drivers/qemu/vm.js';
import {
  busyWhile,
  idleEnough,
  moveTo,
  needsWake,
  parkable,
  type Parkable,
} from '../../../src/services/sandboxes/tiers.js';

function standIn(): { sb: Parkable; log: string[] } {
  const log: string[] = [];
  const vm = {
    pause: async () => void log.push('stop'),
    resume: async () => void log.push('cont'),
  } as unknown as Vm;
  const agent = {
    configure: async (c: { timeMs?: number }) => void log.push(`clock ${typeof c.timeMs}`),
  } as unknown as AgentClient;
  return { sb: { id: 'sbx-1', vm, agent, ...parkable('running') }, log };
}

test('a pause then a racing wake run in order and end awake, the clock pushed', async () => {
  const { sb, log } = standIn();
  const tiers: string[] = [];
  const pause = moveTo(sb, 'paused', (t) => tiers.push(t));
  assert.equal(needsWake(sb), true, 'a move under way: a request waits for it');
  await Promise.all([pause, moveTo(sb, 'running', (t) => tiers.push(t))]);
  assert.deepEqual(log, ['stop', 'cont', 'clock number']);
  assert.deepEqual(tiers, ['paused', 'running']);
  assert.equal(needsWake(sb), false);
  await moveTo(sb, 'running', () => assert.fail('a move to where it is does nothing'));
});

test('a failed move leaves the tier as it was and does not block the next', async () => {
  const { sb } = standIn();
  (sb.vm as unknown as { pause: () => Promise<void> }).pause = async () => {
    throw new Error('monitor gone');
  };
  await assert.rejects(
    moveTo(sb, 'paused', () => undefined),
    /monitor gone/,
  );
  assert.equal(sb.tier, 'running');
  assert.equal(sb.queued, 0);
});

test('the idle policy parks an awake sandbox with nothing under way after its time', async () => {
  const { sb } = standIn();
  const t0 = sb.lastUsed;
  assert.equal(idleEnough(sb, null, t0 + 1e9), false, 'null: never');
  assert.equal(idleEnough(sb, 10, t0 + 9_999), false);
  assert.equal(idleEnough(sb, 10, t0 + 10_000), true);
  let finish!: () => void;
  const running = busyWhile(sb, new Promise<void>((r) => (finish = r)));
  assert.equal(idleEnough(sb, 10, t0 + 60_000), false, 'a command under way');
  finish();
  await running;
  assert.ok(sb.lastUsed >= t0, 'its end counts as the last use');
  assert.equal(idleEnough(sb, 10, sb.lastUsed + 10_000), true);
  sb.tier = 'paused';
  assert.equal(idleEnough(sb, 10, sb.lastUsed + 60_000), false, 'already parked');
});
