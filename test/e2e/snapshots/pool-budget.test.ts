/**
 * The host-wide pool budget with real pool VMs (TCG here): three snapshots whose pools
 * together ask for more than the budget. The pools never take more than it (count and
 * memory, sampled all along), the least recently forked snapshot's pool gives way, a fork
 * of it still works by the cold path, and that fork wins its pool room back.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';

const BUDGET = { vms: 4, memoryBytes: 1024 * 1024 * 1024 };
const TAGS = ['pa', 'pb', 'pc'] as const;

let home: TestHome;
let s: TestServices;
/** The most the pools took at once, sampled every 20 ms from the first pool on. */
const most = { vms: 0, memoryBytes: 0 };
let sampler: NodeJS.Timeout | undefined;

before(async () => {
  home = await makeTestHome();
  s = await startServices(home, { defaultPool: 0, poolBudget: BUDGET });
  for (const tag of TAGS) {
    await s.snapshots.create({ tag, warm: [`echo ${tag} > /root/tag`] }, caller);
  }
  sampler = setInterval(() => {
    const { vms, memoryBytes } = s.snapshots.pool.usage();
    most.vms = Math.max(most.vms, vms);
    most.memoryBytes = Math.max(most.memoryBytes, memoryBytes);
  }, 20);
});

after(async () => {
  clearInterval(sampler);
  await closeAndCheck(s, home);
});

/** Ready and held back, per snapshot, as `snapshot info` shows them. */
async function pools(): Promise<Record<string, [number, number]>> {
  const out: Record<string, [number, number]> = {};
  for (const tag of TAGS) {
    const { pool } = await s.snapshots.get(tag);
    out[tag] = [pool.ready, pool.held ?? 0];
  }
  return out;
}

async function forkOne(tag: string): Promise<string> {
  const r = await s.snapshots.fork({ snapshot: tag, n: 1 }, caller);
  assert.deepEqual(r.failed, [], JSON.stringify(r.failed));
  const id = (r.sandboxes[0] as { id: string }).id;
  assert.equal(await sh(s, id, 'cat /root/tag'), `${tag}\n`);
  return id;
}

test('three pools over the budget: the least recently forked one gives way, a fork of it still works and wins room back', async () => {
  const forks: string[] = [];
  try {
    await s.snapshots.setPool('pa', 2);
    await s.snapshots.pool.settled('pa');
    await s.snapshots.setPool('pb', 2);
    await s.snapshots.pool.settled('pb');
    forks.push(await forkOne('pa')); // then pb: pa is the least recently forked
    forks.push(await forkOne('pb'));
    await s.snapshots.pool.settled('pa');
    await s.snapshots.pool.settled('pb');
    assert.deepEqual(await pools(), { pa: [2, 0], pb: [2, 0], pc: [0, 0] });

    await s.snapshots.setPool('pc', 2);
    await s.snapshots.pool.settled('pc');
    assert.deepEqual(await pools(), { pa: [0, 2], pb: [2, 0], pc: [2, 0] });
    const { budget } = (await s.snapshots.get('pa')).pool;
    assert.deepEqual(
      [budget?.vms, budget?.memory_bytes, budget?.used_vms],
      [4, BUDGET.memoryBytes, 4],
    );
    assert.ok((budget?.used_memory_bytes ?? 0) > 0, 'pool VMs are measured (cgroups)');

    // Its pool is empty: this fork starts a QEMU of its own, and the pool refills after it,
    // taking room from pb, now the least recently forked.
    forks.push(await forkOne('pa'));
    await s.snapshots.pool.settled('pa');
    assert.deepEqual(await pools(), { pa: [2, 0], pb: [0, 2], pc: [2, 0] });
  } finally {
    await Promise.all(forks.map((id) => s.sandboxes.kill(id)));
  }
  assert.ok(most.vms <= BUDGET.vms, `the pools took ${most.vms} VMs at once`);
  assert.ok(most.memoryBytes <= BUDGET.memoryBytes, `the pools took ${most.memoryBytes} bytes`);
  assert.ok(most.vms === BUDGET.vms, 'the budget was reached (the test tests something)');
});
