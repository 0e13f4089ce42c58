/**
 * The host-wide pool budget: what fits, who gives way (the least recently forked
 * snapshots' pools, never a starting VM, never the asking snapshot's own), its defaults and
 * environment; and the pool keeping every snapshot's members within it, with stand-in
 * children (no QEMU: the pool only starts, measures and ends them).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_POOL_BUDGET,
  PoolBudget,
  poolBudgetFromEnv,
  type BudgetMember,
} from '../../../src/services/snapshots/pool-budget.js';
import { Pool } from '../../../src/services/snapshots/pool.js';
import type { PreparedChild } from '../../../src/services/snapshots/fork.js';

const MiB = 1024 * 1024;
const member = (tag: string, id: string, mib?: number): BudgetMember => ({
  tag,
  id,
  bytes: mib === undefined ? undefined : mib * MiB,
});

test('a member fits while the count and the memory allow it, with nobody ended', () => {
  const b = new PoolBudget({ vms: 3, memoryBytes: 100 * MiB });
  assert.deepEqual(b.plan('a', 30 * MiB, [member('b', 'b1', 30), member('b', 'b2', 30)]), {
    fits: true,
    evict: [],
  });
});

test('past the count, the least recently forked pools give way, oldest first', () => {
  const b = new PoolBudget({ vms: 3, memoryBytes: 1000 * MiB });
  b.touch('old');
  b.touch('mid');
  b.touch('new');
  const members = [member('mid', 'm1'), member('old', 'o1'), member('old', 'o2')];
  assert.deepEqual(b.plan('new', undefined, members), { fits: true, evict: ['o2'] });
  b.touch('old'); // a fork of it: now 'mid' is the least recent
  assert.deepEqual(b.plan('new', undefined, members), { fits: true, evict: ['m1'] });
});

test('past the memory, as many older members as it takes go', () => {
  const b = new PoolBudget({ vms: 10, memoryBytes: 100 * MiB });
  b.touch('old');
  b.touch('new');
  const members = [member('old', 'o1', 40), member('old', 'o2', 40), member('new', 'n1', 15)];
  assert.deepEqual(b.plan('new', 80 * MiB, members), { fits: true, evict: ['o2', 'o1'] });
});

test('a pool forked less recently than all others is held back, ending nobody', () => {
  const b = new PoolBudget({ vms: 2, memoryBytes: 1000 * MiB });
  b.touch('old');
  b.touch('new');
  assert.deepEqual(b.plan('old', undefined, [member('new', 'n1'), member('new', 'n2')]), {
    fits: false,
    evict: [],
  });
  // Nor does its own pool make room for itself, nor a VM still starting.
  const starting = { ...member('old', 'o1'), starting: true };
  assert.deepEqual(b.plan('new', undefined, [member('new', 'n1'), starting]), {
    fits: false,
    evict: [],
  });
});

test('one member larger than the whole memory budget never fits; a budget of 0 VMs, none', () => {
  assert.equal(
    new PoolBudget({ vms: 4, memoryBytes: 10 * MiB }).plan('a', 11 * MiB, []).fits,
    false,
  );
  assert.equal(new PoolBudget({ vms: 0, memoryBytes: 10 * MiB }).plan('a', 0, []).fits, false);
});

test('the budget comes from FORKD_POOL_BUDGET_VMS and _MIB, else the defaults', () => {
  assert.deepEqual(poolBudgetFromEnv({}), DEFAULT_POOL_BUDGET);
  assert.deepEqual(poolBudgetFromEnv({ FORKD_POOL_BUDGET_VMS: '3', FORKD_POOL_BUDGET_MIB: '64' }), {
    vms: 3,
    memoryBytes: 64 * MiB,
  });
  assert.deepEqual(poolBudgetFromEnv({ FORKD_POOL_BUDGET_VMS: 'x', FORKD_POOL_BUDGET_MIB: '-1' }), {
    ...DEFAULT_POOL_BUDGET,
  });
});

/** A pool over stand-in children of `mib` MiB each; `alive` counts what was started and not ended. */
function standInPool(limits: { vms: number; memoryBytes: number }, mib = 10) {
  let n = 0;
  const alive = new Set<string>();
  let most = 0;
  const pool = new Pool(
    async (tag) => {
      const id = `${tag}-${++n}`;
      alive.add(id);
      most = Math.max(most, alive.size);
      return { id, dir: '', vm: { alive: true } } as unknown as PreparedChild;
    },
    async (child) => void alive.delete(child.id),
    { warn: () => undefined, info: () => undefined },
    new PoolBudget(limits),
    async () => mib * MiB,
  );
  return { pool, alive, most: () => most };
}

test('three pools under a budget smaller than their sum: the least recently forked one shrinks, and wins room back when forked', async () => {
  const { pool, alive, most } = standInPool({ vms: 4, memoryBytes: 1000 * MiB });
  await pool.setSize('a', 2);
  await pool.settled('a');
  await pool.setSize('b', 2);
  await pool.settled('b');
  pool.take('a'); // a fork of a, then of b: a is now the least recently forked
  await pool.settled('a');
  pool.take('b');
  await pool.settled('b');
  // `take` handed one VM out each: the fork owns it now (the stand-in never ends it).
  const handedOut = 2;
  await pool.setSize('c', 2);
  await pool.settled('c');
  assert.deepEqual(
    ['a', 'b', 'c'].map((t) => pool.state(t)),
    [
      { size: 2, ready: 0, prewarm: false, held: 2 },
      { size: 2, ready: 2, prewarm: false, held: 0 },
      { size: 2, ready: 2, prewarm: false, held: 0 },
    ],
  );
  assert.deepEqual(pool.usage(), {
    vms: 4,
    memoryBytes: 40 * MiB,
    limits: { vms: 4, memoryBytes: 1000 * MiB },
  });
  assert.ok(most() <= 4 + handedOut, `never more than the budget at once: ${most()}`);
  // A fork of `a` finds no VM (its cold path), and its pool takes room from `b` now.
  assert.equal(pool.take('a'), undefined);
  await pool.settled('a');
  assert.deepEqual(
    ['a', 'b', 'c'].map((t) => [pool.state(t).ready, pool.state(t).held]),
    [
      [2, 0],
      [0, 2],
      [2, 0],
    ],
  );
  assert.equal(alive.size - handedOut, 4);
  await pool.close();
  assert.equal(alive.size, handedOut);
});

test('the memory budget holds pools back too, and a pool removed frees room for a held one', async () => {
  const { pool } = standInPool({ vms: 100, memoryBytes: 35 * MiB }, 10);
  await pool.setSize('a', 2);
  await pool.settled('a');
  await pool.setSize('b', 2);
  await pool.settled('b');
  assert.deepEqual(pool.usage().memoryBytes, 30 * MiB);
  assert.deepEqual([pool.state('a').ready, pool.state('b').ready], [1, 2]);
  assert.equal(pool.state('a').held, 1);
  await pool.setSize('b', 0);
  await pool.settled('a');
  assert.deepEqual([pool.state('a').ready, pool.state('a').held], [2, 0]);
  await pool.close();
});
