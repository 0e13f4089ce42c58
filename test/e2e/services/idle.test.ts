/**
 * Idle tiers with a real QEMU (docs/idle.md), two sandboxes booted together for the whole
 * file. The first (no NIC, no idle policy of its own): a paused sandbox's QEMU uses no CPU
 * time over 5 s, an exec wakes it and answers, and its guest clock was pushed to the host's;
 * a paused sandbox survives a daemon restart still paused and wakes on the next exec; with
 * the daemon's idle policy it pauses itself after its time without a request. Hibernated, it
 * holds no QEMU, and an exec restores it with a counter process going on from its value and
 * a file on its disk still there; it stays hibernated across a restart; the idle policy
 * hibernates it; killed while hibernated it leaves no files. The second has an idle policy of
 * its own (pause after 1 s) and an HTTP server on a published port: it pauses itself while
 * its sibling stays running; a PATCH of its policy leaves it paused, applies at once (never
 * paused, then paused after 1 s again) and is kept across a restart; a GET through the host
 * port wakes it and is answered, paused, hibernated, and hibernated across a daemon restart.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildApp } from '../../../src/api/app.js';
import type { ServiceOptions } from '../../../src/services/index.js';
import { makeTestHome, qemusUnder, type TestHome } from '../../helpers/home.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';

let home: TestHome;
let s: TestServices;
let id: string;
/** The sibling with an idle policy of its own and a published HTTP server. */
let web: string;

/** The daemon (its services) with these idle defaults; no namespaces made ahead. */
const start = (idle: Pick<ServiceOptions, 'pauseIdleAfterS' | 'hibernateIdleAfterS'> = {}) =>
  startServices(home, { pollMs: 200, network: { poolSize: 0 }, ...idle });

/** The daemon goes (its sandboxes stay as they are) and a new one starts on the same home. */
async function restart(idle: Parameters<typeof start>[0] = {}): Promise<void> {
  await s.detach();
  s.store.close();
  s = await start(idle);
}

before(async () => {
  home = await makeTestHome();
  s = await start();
  [id, web] = (
    await Promise.all([
      s.sandboxes.create({ timeout_s: 600, network: 'none' }, caller),
      s.sandboxes.create({ timeout_s: 600, idle: { pause_after_s: 1 } }, caller),
    ])
  ).map((sb) => sb.id) as [string, string];
});

after(async () => {
  await closeAndCheck(s, home);
});

/** CPU seconds a process used so far (user + system, all its threads). */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in 100 Hz ticks
}

async function guestSeconds(): Promise<number> {
  const r = await s.sandboxes.exec(id, { argv: ['date', '+%s'] });
  return Number(Buffer.from(r.stdout, 'base64').toString('utf8').trim());
}

test('a paused sandbox uses no CPU; an exec wakes it, answers, and its clock is current', async () => {
  const pid = (await s.sandboxes.get(id)).pid as number;
  const paused = await s.sandboxes.pause(id);
  assert.deepEqual([paused.state, paused.tier], ['running', 'paused']);
  assert.equal((await s.sandboxes.pause(id)).tier, 'paused', 'pausing again answers it as it is');
  const before = await cpuSeconds(pid);
  await sleep(5000);
  const used = (await cpuSeconds(pid)) - before;
  assert.ok(used <= 0.02, `a paused QEMU used ${used.toFixed(2)} s of CPU in 5 s`);

  const woken = Date.now();
  const guestNow = await guestSeconds();
  assert.equal((await s.sandboxes.get(id)).tier, 'running', 'the exec woke it');
  // Stopped for 5 s, the guest's clock stood still: without the push it would lag by ~5 s.
  assert.ok(guestNow >= Math.floor(woken / 1000) - 1, `guest clock ${guestNow}, host ${woken}`);
  assert.equal((await s.sandboxes.resume(id)).tier, 'running', 'resuming a running one: no-op');
});

/** Wait until a sandbox is in `tier` (the idle sweep runs once a second). */
async function until(which: string, tier: string, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while ((await s.sandboxes.get(which)).tier !== tier && Date.now() < deadline) await sleep(250);
  assert.equal((await s.sandboxes.get(which)).tier, tier, `${which} ${tier} in ${ms} ms`);
}

test('a sandbox with its own idle policy pauses itself; its sibling without one runs on', async () => {
  assert.deepEqual((await s.sandboxes.get(web)).idle, {
    pause_after_s: 1,
    hibernate_after_s: null,
    source: 'sandbox',
  });
  assert.deepEqual((await s.sandboxes.get(id)).idle, {
    pause_after_s: null,
    hibernate_after_s: null,
    source: 'daemon',
  });
  await sh(s, web, 'mkdir -p /www && echo served > /www/index.html && httpd -p 8080 -h /www');
  await until(web, 'paused');
  assert.equal((await s.sandboxes.get(id)).tier, 'running', 'no policy: it was not paused');
});

/** PATCH /v1/sandboxes/:id through the real route and services. */
async function patch(which: string, payload: object): Promise<{ tier: string; idle: unknown }> {
  const app = await buildApp(s.services, { requireAuth: false });
  try {
    const r = await app.inject({ method: 'PATCH', url: `/v1/sandboxes/${which}`, payload });
    assert.equal(r.statusCode, 200, r.body);
    return r.json();
  } finally {
    await app.close();
  }
}

test('PATCH idle: a paused sandbox keeps its tier; the new policy applies at once, its time from now', async () => {
  assert.equal((await s.sandboxes.get(web)).tier, 'paused', 'paused by its own policy');
  const never = await patch(web, { idle: { pause_after_s: 0, hibernate_after_s: 600 } });
  assert.deepEqual(never.idle, { pause_after_s: null, hibernate_after_s: 600, source: 'sandbox' });
  assert.equal(never.tier, 'paused', 'the change did not wake it');
  await sh(s, web, 'true'); // woken; its old policy (pause after 1 s) would pause it again
  await sleep(2100); // two idle sweeps
  assert.equal((await s.sandboxes.get(web)).tier, 'running', 'never paused now');
  // Its own policy dropped: it follows the daemon's defaults (none here) again.
  const dropped = await patch(web, { idle: null });
  assert.deepEqual(dropped.idle, {
    pause_after_s: null,
    hibernate_after_s: null,
    source: 'daemon',
  });
  const again = await patch(web, { idle: { pause_after_s: 1, hibernate_after_s: 600 } });
  assert.deepEqual(again.idle, { pause_after_s: 1, hibernate_after_s: 600, source: 'sandbox' });
  await until(web, 'paused', 10_000);
});

/** A GET through a published port's host listener (no daemon route in between). */
async function get(hostPort: number): Promise<string> {
  const r = await fetch(`http://127.0.0.1:${hostPort}/index.html`, {
    signal: AbortSignal.timeout(60_000),
  });
  return r.text();
}

test("a published port's request wakes a paused and a hibernated sandbox and is answered", async () => {
  const pub = await s.services.network!.publish(web, 8080);
  await until(web, 'paused');
  assert.equal(await get(pub.host_port), 'served\n', 'paused: woken by the connection');

  const hib = await s.sandboxes.pause(web, { tier: 'hibernated' });
  assert.deepEqual([hib.tier, hib.pid], ['hibernated', null]);
  assert.equal(await get(pub.host_port), 'served\n', 'hibernated: restored, same host port');
  assert.notEqual((await s.sandboxes.get(web)).tier, 'hibernated');

  // Hibernated across a daemon restart: the new daemon listens on its host port again.
  await s.sandboxes.pause(web, { tier: 'hibernated' });
  await restart();
  assert.deepEqual(s.started.adopted.sort(), [id, web].sort());
  assert.deepEqual(
    (await s.sandboxes.get(web)).idle,
    { pause_after_s: 1, hibernate_after_s: 600, source: 'sandbox' },
    'its changed policy was stored',
  );
  assert.equal(await get(pub.host_port), 'served\n', 'after a restart: restored by a GET');

  await s.sandboxes.kill(web);
  await assert.rejects(
    new Promise((resolve, reject) =>
      connect(pub.host_port, '127.0.0.1').on('connect', resolve).on('error', reject),
    ),
    /ECONNREFUSED/,
    'killed: its port closed',
  );
});

async function shell(script: string): Promise<string> {
  const r = await s.sandboxes.exec(id, { argv: ['sh', '-c', script] });
  assert.equal(r.exit_code, 0, Buffer.from(r.stderr, 'base64').toString('utf8'));
  return Buffer.from(r.stdout, 'base64').toString('utf8').trim();
}

const counter = () => shell('cat /tmp/count').then(Number);

/**
 * The counter once it reached `min`, polled for up to `ms` of wall time (not a number of
 * polls: on a quiet host 50 execs take less than the 0.5 s the loop needs to count to 5).
 */
async function counterAtLeast(min: number, ms = 10_000): Promise<number> {
  const deadline = Date.now() + ms;
  let n = await counter().catch(() => 0);
  while (n < min && Date.now() < deadline) {
    await sleep(100);
    n = await counter().catch(() => 0);
  }
  return n;
}

/** Hibernate it and check no QEMU runs for it any more. */
async function hibernate(): Promise<void> {
  const dir = home.paths.sandboxes;
  const info = await s.sandboxes.pause(id, { tier: 'hibernated' });
  assert.deepEqual([info.state, info.tier, info.pid], ['running', 'hibernated', null]);
  assert.deepEqual(await qemusUnder(`${dir}/${id}/`), [], 'a hibernated sandbox has no QEMU');
}

test('hibernated it has no QEMU; an exec restores it, its processes and files as they were', async () => {
  // A counter in guest memory (a shell loop writing to tmpfs) and a file on its disk.
  await shell(
    "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done' " +
      '</dev/null >/dev/null 2>&1 & echo kept > /hibernated-note',
  );
  const before = await counterAtLeast(5);
  assert.ok(before >= 5, `the counter runs (${before})`);
  await hibernate();
  const woken = Date.now();
  const after = await counter(); // wakes it
  assert.equal((await s.sandboxes.get(id)).tier, 'running');
  assert.ok(after >= before, `the counter went on from ${before}, not restarted: ${after}`);
  assert.equal(await shell('cat /hibernated-note'), 'kept');
  assert.ok(Number(await shell('date +%s')) >= Math.floor(woken / 1000) - 1, 'clock pushed');
  const later = await counterAtLeast(after + 1);
  assert.ok(later > after, 'it keeps counting after the wake');
});

test('a hibernated sandbox survives a daemon restart hibernated, and an exec wakes it', async () => {
  const before = await counter();
  await hibernate();
  await restart();
  assert.deepEqual([s.started.adopted, s.started.dead], [[id], []]);
  assert.equal((await s.sandboxes.get(id)).tier, 'hibernated');
  assert.ok((await counter()) >= before, 'woken, the counter went on');
  assert.equal((await s.sandboxes.get(id)).tier, 'running');
});

test('a paused sandbox survives a daemon restart paused, and the next exec wakes it', async () => {
  await s.sandboxes.pause(id);
  // The new daemon also has an idle policy: pause after 1 s without a request.
  await restart({ pauseIdleAfterS: 1 });
  assert.deepEqual(s.started.adopted, [id]);
  const adopted = await s.sandboxes.get(id);
  assert.equal(adopted.tier, 'paused');
  const before = await cpuSeconds(adopted.pid as number);
  await sleep(1000);
  assert.ok((await cpuSeconds(adopted.pid as number)) - before <= 0.02, 'still stopped');
  const r = await s.sandboxes.exec(id, { argv: ['echo', 'awake'] });
  assert.equal(Buffer.from(r.stdout, 'base64').toString('utf8'), 'awake\n');
  assert.equal((await s.sandboxes.get(id)).tier, 'running');
});

test('with an idle policy a sandbox nobody uses pauses itself; a request wakes it', async () => {
  const deadline = Date.now() + 15_000;
  while ((await s.sandboxes.get(id)).tier !== 'paused' && Date.now() < deadline) await sleep(250);
  assert.equal((await s.sandboxes.get(id)).tier, 'paused', 'paused after 1 s idle');
  assert.equal((await guestSeconds()) > 0, true);
  assert.equal((await s.sandboxes.get(id)).tier, 'running');
});

test('a guest working on its own is not idle: it stays awake until its job ends', async () => {
  const r = await s.sandboxes.exec(id, {
    argv: [
      'sh',
      '-c',
      '(i=0; while [ $i -lt 4000000 ]; do i=$((i+1)); done) >/dev/null 2>&1 & echo $!',
    ],
  });
  const job = Buffer.from(r.stdout, 'base64').toString('utf8').trim();
  await sleep(5000); // five times its 1 s pause time, without a request
  assert.equal((await s.sandboxes.get(id)).tier, 'running', 'a busy guest is left awake');
  await shell(`kill ${job}`);
  const deadline = Date.now() + 15_000;
  while ((await s.sandboxes.get(id)).tier !== 'paused' && Date.now() < deadline) await sleep(250);
  assert.equal((await s.sandboxes.get(id)).tier, 'paused', 'quiet again, it pauses');
});

test('an idle policy hibernates it; killed while hibernated it leaves no files', async () => {
  await restart({ hibernateIdleAfterS: 1 });
  const waitHibernated = async () => {
    const deadline = Date.now() + 30_000;
    while ((await s.sandboxes.get(id)).tier !== 'hibernated' && Date.now() < deadline)
      await sleep(250);
    assert.equal((await s.sandboxes.get(id)).tier, 'hibernated', 'hibernated after 1 s idle');
  };
  await waitHibernated();
  assert.equal(await shell('cat /hibernated-note'), 'kept', 'a request wakes it');
  await waitHibernated();
  const dir = `${home.paths.sandboxes}/${id}`;
  assert.ok(existsSync(`${dir}/hibernated/memory`));
  await s.sandboxes.kill(id);
  assert.equal(existsSync(dir), false, 'its capture went with it');
  assert.deepEqual(
    [(await s.sandboxes.get(id)).state, (await s.sandboxes.get(id)).tier],
    ['stopped', 'running'],
  );
});
