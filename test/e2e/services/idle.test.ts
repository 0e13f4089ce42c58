/**
 * Idle tiers with a real QEMU (docs/idle.md), one booted sandbox for the whole file: a
 * paused sandbox's QEMU uses no CPU time over 5 s, an exec wakes it and answers, and its
 * guest clock was pushed to the host's; a paused sandbox survives a service restart (a
 * daemon restart) still paused and wakes on the next exec.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxManager } from '../../../src/services/sandboxes/service.js';
import { Store } from '../../../src/store/db.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';

let home: TestHome;
let store: Store;
let manager: SandboxManager;
let id: string;

before(async () => {
  home = await makeTestHome();
  store = Store.open(home.paths.db);
  manager = new SandboxManager({ paths: home.paths, store, pollMs: 200 });
  await manager.start();
  id = (await manager.create({ timeout_s: 600 }, { principal: 'test' })).id;
});

after(async () => {
  try {
    await manager?.killAll();
    store?.close();
    await assertNoLeftovers(home);
  } finally {
    await home.cleanup();
  }
});

/** CPU seconds a process used so far (user + system, all its threads). */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in 100 Hz ticks
}

async function guestSeconds(): Promise<number> {
  const r = await manager.exec(id, { argv: ['date', '+%s'] });
  return Number(Buffer.from(r.stdout, 'base64').toString('utf8').trim());
}

test('a paused sandbox uses no CPU; an exec wakes it, answers, and its clock is current', async () => {
  const pid = (await manager.get(id)).pid as number;
  const paused = await manager.pause(id);
  assert.deepEqual([paused.state, paused.tier], ['running', 'paused']);
  assert.equal((await manager.pause(id)).tier, 'paused', 'pausing again answers it as it is');
  const before = await cpuSeconds(pid);
  await sleep(5000);
  const used = (await cpuSeconds(pid)) - before;
  assert.ok(used <= 0.02, `a paused QEMU used ${used.toFixed(2)} s of CPU in 5 s`);

  const woken = Date.now();
  const guestNow = await guestSeconds();
  assert.equal((await manager.get(id)).tier, 'running', 'the exec woke it');
  // Stopped for 5 s, the guest's clock stood still: without the push it would lag by ~5 s.
  assert.ok(guestNow >= Math.floor(woken / 1000) - 1, `guest clock ${guestNow}, host ${woken}`);
  assert.equal((await manager.resume(id)).tier, 'running', 'resuming a running one: no-op');
});

test('a paused sandbox survives a daemon restart paused, and the next exec wakes it', async () => {
  await manager.pause(id);
  manager.detach(); // the daemon is gone; its QEMU is not
  manager = new SandboxManager({ paths: home.paths, store, pollMs: 200 });
  const report = await manager.start();
  assert.deepEqual(report.adopted, [id]);
  const adopted = await manager.get(id);
  assert.equal(adopted.tier, 'paused');
  const before = await cpuSeconds(adopted.pid as number);
  await sleep(1000);
  assert.ok((await cpuSeconds(adopted.pid as number)) - before <= 0.02, 'still stopped');
  const r = await manager.exec(id, { argv: ['echo', 'awake'] });
  assert.equal(Buffer.from(r.stdout, 'base64').toString('utf8'), 'awake\n');
  assert.equal((await manager.get(id)).tier, 'running');
});
