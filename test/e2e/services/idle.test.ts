/**
 * Idle tiers with a real QEMU (docs/idle.md), one booted sandbox for the whole file: a
 * paused sandbox's QEMU uses no CPU time over 5 s, an exec wakes it and answers, and its
 * guest clock was pushed to the host's; a paused sandbox survives a service restart (a
 * daemon restart) still paused and wakes on the next exec; with an idle policy it pauses
 * itself after its time without a request. Hibernated, it holds no QEMU, and an exec
 * restores it with a counter process going on from its value and a file on its disk still
 * there; it stays hibernated across a restart; the idle policy hibernates it; killed while
 * hibernated it leaves no files.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxManager } from '../../../src/services/sandboxes/service.js';
import { Store } from '../../../src/store/db.js';
import { assertNoLeftovers, makeTestHome, qemusUnder, type TestHome } from '../../helpers/home.js';

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

async function shell(script: string): Promise<string> {
  const r = await manager.exec(id, { argv: ['sh', '-c', script] });
  assert.equal(r.exit_code, 0, Buffer.from(r.stderr, 'base64').toString('utf8'));
  return Buffer.from(r.stdout, 'base64').toString('utf8').trim();
}

const counter = () => shell('cat /tmp/count').then(Number);

/** Hibernate it and check no QEMU runs for it any more. */
async function hibernate(): Promise<void> {
  const dir = home.paths.sandboxes;
  const info = await manager.pause(id, { tier: 'hibernated' });
  assert.deepEqual([info.state, info.tier, info.pid], ['running', 'hibernated', null]);
  assert.deepEqual(await qemusUnder(`${dir}/${id}/`), [], 'a hibernated sandbox has no QEMU');
}

test('hibernated it has no QEMU; an exec restores it, its processes and files as they were', async () => {
  // A counter in guest memory (a shell loop writing to tmpfs) and a file on its disk.
  await shell(
    "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done' " +
      '</dev/null >/dev/null 2>&1 & echo kept > /hibernated-note',
  );
  let before = 0;
  for (let i = 0; i < 50 && before < 5; i++) before = await counter().catch(() => 0);
  assert.ok(before >= 5, `the counter runs (${before})`);
  await hibernate();
  const woken = Date.now();
  const after = await counter(); // wakes it
  assert.equal((await manager.get(id)).tier, 'running');
  assert.ok(after >= before, `the counter went on from ${before}, not restarted: ${after}`);
  assert.equal(await shell('cat /hibernated-note'), 'kept');
  assert.ok(Number(await shell('date +%s')) >= Math.floor(woken / 1000) - 1, 'clock pushed');
  let later = after;
  for (let i = 0; i < 50 && later <= after; i++) later = await counter();
  assert.ok(later > after, 'it keeps counting after the wake');
});

test('a hibernated sandbox survives a daemon restart hibernated, and an exec wakes it', async () => {
  const before = await counter();
  await hibernate();
  manager.detach();
  manager = new SandboxManager({ paths: home.paths, store, pollMs: 200 });
  const report = await manager.start();
  assert.deepEqual([report.adopted, report.dead], [[id], []]);
  assert.equal((await manager.get(id)).tier, 'hibernated');
  assert.ok((await counter()) >= before, 'woken, the counter went on');
  assert.equal((await manager.get(id)).tier, 'running');
});

test('a paused sandbox survives a daemon restart paused, and the next exec wakes it', async () => {
  await manager.pause(id);
  manager.detach(); // the daemon is gone; its QEMU is not
  // The new daemon also has an idle policy: pause after 1 s without a request.
  manager = new SandboxManager({ paths: home.paths, store, pollMs: 200, pauseIdleAfterS: 1 });
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

test('with an idle policy a sandbox nobody uses pauses itself; a request wakes it', async () => {
  const deadline = Date.now() + 15_000;
  while ((await manager.get(id)).tier !== 'paused' && Date.now() < deadline) await sleep(250);
  assert.equal((await manager.get(id)).tier, 'paused', 'paused after 1 s idle');
  assert.equal((await guestSeconds()) > 0, true);
  assert.equal((await manager.get(id)).tier, 'running');
});

test('an idle policy hibernates it; killed while hibernated it leaves no files', async () => {
  manager.detach();
  manager = new SandboxManager({ paths: home.paths, store, pollMs: 200, hibernateIdleAfterS: 1 });
  await manager.start();
  const waitHibernated = async () => {
    const deadline = Date.now() + 30_000;
    while ((await manager.get(id)).tier !== 'hibernated' && Date.now() < deadline) await sleep(250);
    assert.equal((await manager.get(id)).tier, 'hibernated', 'hibernated after 1 s idle');
  };
  await waitHibernated();
  assert.equal(await shell('cat /hibernated-note'), 'kept', 'a request wakes it');
  await waitHibernated();
  const dir = `${home.paths.sandboxes}/${id}`;
  assert.ok(existsSync(`${dir}/hibernated/memory`));
  await manager.kill(id);
  assert.equal(existsSync(dir), false, 'its capture went with it');
  assert.deepEqual(
    [(await manager.get(id)).state, (await manager.get(id)).tier],
    ['stopped', 'running'],
  );
});
