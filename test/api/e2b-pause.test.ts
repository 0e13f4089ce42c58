/**
 * E2B's pause over fake services (inject, no sockets): pause and resume on forkd's tiers
 * (`keepMemory: false` is the halted tier), held until connect(); auto-pause as forkd's idle
 * policy; and the timeout as E2B keeps it — a paused sandbox does not expire, connect()
 * gives it the timeout it asks for, a running one's is never shortened.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { e2bOverFakes, ID } from '../helpers/e2b-inject.js';
import { SEED } from '../helpers/fake-services.js';

const { fake, control, envd, rpc, callsOf } = e2bOverFakes();

test('pause and resume map onto forkd tiers (keepMemory false: halted): 409 when already so; connect wakes a paused one', async () => {
  const pause = () => control({ method: 'POST', url: `/sandboxes/${ID}/pause` });
  const pauseWith = (payload: Record<string, unknown>) =>
    control({ method: 'POST', url: `/sandboxes/${ID}/pause`, payload });
  const badBody = await pauseWith({ memory: 'no' });
  assert.deepEqual([badBody.statusCode, /memory/.test(badBody.json().message)], [400, true]);
  // pause({ keepMemory: false }): forkd's halted tier, held until connect() as a pause is.
  assert.equal((await pauseWith({ memory: false })).statusCode, 204);
  assert.deepEqual(callsOf('sandboxes', 'pause')[0], [
    SEED.sandbox,
    { tier: 'halted', holdTimeout: true },
  ]);
  assert.equal((await control({ method: 'GET', url: `/sandboxes/${ID}` })).json().state, 'paused');
  assert.equal((await envd({ method: 'GET', url: '/health' })).statusCode, 502);
  const booted = await control({ method: 'POST', url: `/sandboxes/${ID}/connect`, payload: {} });
  assert.equal(booted.statusCode, 201);
  assert.equal((await pause()).statusCode, 204);
  assert.deepEqual(callsOf('sandboxes', 'pause')[1], [
    SEED.sandbox,
    { tier: 'paused', holdTimeout: true },
  ]);
  const again = await pause();
  assert.deepEqual([again.statusCode, again.json().code], [409, 409]);
  assert.equal((await control({ method: 'GET', url: `/sandboxes/${ID}` })).json().state, 'paused');
  // Held until connect: envd answers as for a sandbox that does not run, and wakes nothing.
  assert.equal((await envd({ method: 'GET', url: '/health' })).statusCode, 502);
  const held = await rpc('process.Process/List', {});
  assert.deepEqual([held.statusCode, held.json().code], [503, 'unavailable']);
  assert.equal((await control({ method: 'GET', url: `/sandboxes/${ID}` })).json().state, 'paused');
  const listed = await control({ method: 'GET', url: '/v2/sandboxes?state=paused' });
  assert.deepEqual(
    listed.json().map((s: { sandboxID: string }) => s.sandboxID),
    [ID],
  );

  const woken = await control({ method: 'POST', url: `/v2/sandboxes/${ID}/connect`, payload: {} });
  assert.equal(woken.statusCode, 201);
  assert.equal((await control({ method: 'GET', url: `/sandboxes/${ID}` })).json().state, 'running');
  assert.equal((await envd({ method: 'GET', url: '/health' })).statusCode, 204);
  const resume = () =>
    control({ method: 'POST', url: `/sandboxes/${ID}/resume`, payload: { timeout: 30 } });
  assert.equal((await resume()).statusCode, 409);
  await pause();
  const resumed = await resume();
  assert.equal(resumed.statusCode, 201);
  assert.equal(resumed.json().sandboxID, ID);
  assert.deepEqual(callsOf('sandboxes', 'extend').at(-1), [SEED.sandbox, 30]);
});

test("auto-pause (lifecycle onTimeout 'pause') is the idle policy: paused its timeout after its last request", async () => {
  const create = (payload: Record<string, unknown>) =>
    control({
      method: 'POST',
      url: '/v2/sandboxes',
      payload: { templateID: SEED.snapshot, ...payload },
    });
  // What the current SDK sends for { lifecycle: { onTimeout: 'pause', autoResume: true } }.
  const r = await create({ timeout: 30, autoPause: true, autoResume: { enabled: true } });
  assert.equal(r.statusCode, 201, r.body);
  assert.deepEqual(callsOf('snapshots', 'fork')[0]?.[0], {
    snapshot: SEED.snapshot,
    n: 1,
    idle: { pause_after_s: 30 },
  });
  const id = r.json().sandboxID as string;
  const info = (await control({ method: 'GET', url: `/sandboxes/${id}` })).json();
  assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true });
  // Its timeout is when it pauses: set timeout moves that time, nothing kills it.
  const set = await control({
    method: 'POST',
    url: `/sandboxes/${id}/timeout`,
    payload: { timeout: 90 },
  });
  assert.equal(set.statusCode, 204);
  assert.deepEqual(callsOf('sandboxes', 'update').at(-1), [
    `sbx-${id.slice(3)}`,
    { idle: { pause_after_s: 90 } },
  ]);
  assert.deepEqual(callsOf('sandboxes', 'extend'), []);
  const plain = (await control({ method: 'GET', url: `/sandboxes/${ID}` })).json();
  assert.deepEqual(plain.lifecycle, { onTimeout: 'kill', autoResume: false });
  // Without auto-resume: a marker label (not metadata); paused, only connect wakes it.
  const manual = await create({ timeout: 30, autoPause: true, autoResume: { enabled: false } });
  assert.equal(manual.statusCode, 201, manual.body);
  const mid = manual.json().sandboxID as string;
  const minfo = (await control({ method: 'GET', url: `/sandboxes/${mid}` })).json();
  assert.deepEqual(minfo.lifecycle, { onTimeout: 'pause', autoResume: false });
  assert.deepEqual(minfo.metadata, {});
  // What forkd cannot do is refused, naming the field.
  for (const [payload, field] of [
    [{ autoPause: true, autoPauseMemory: false }, /autoPauseMemory/],
    [{ autoResume: { enabled: true } }, /autoResume/],
    [{ autoPause: 'yes' }, /autoPause/],
  ] as const) {
    const bad = await create(payload);
    assert.equal(bad.statusCode, 400, JSON.stringify(payload));
    assert.match(bad.json().message, field);
  }
});

test('a paused sandbox does not expire: its timeout is held, connect() gives it the one it asks for', async () => {
  const forkd = () => fake.services.sandboxes.get(SEED.sandbox);
  const deadline = async () => Date.parse((await forkd()).expires_at ?? 'none');
  const inS = (s: number) => Date.now() + s * 1000;
  const timeout = (t: number) =>
    control({ method: 'POST', url: `/sandboxes/${ID}/timeout`, payload: { timeout: t } });
  const connect = (t: number) =>
    control({ method: 'POST', url: `/sandboxes/${ID}/connect`, payload: { timeout: t } });
  assert.equal((await timeout(3600)).statusCode, 204);
  assert.equal((await control({ method: 'POST', url: `/sandboxes/${ID}/pause` })).statusCode, 204);
  assert.equal((await forkd()).expires_at, null, 'no deadline while it is paused');
  // A timeout set while it is paused is what its wake gives back; it stays paused.
  assert.equal((await timeout(1800)).statusCode, 204);
  assert.deepEqual([(await forkd()).tier, (await forkd()).expires_at], ['paused', null]);
  // connect() resumes it for the timeout it names (the SDK sends 300 s unless told).
  assert.equal((await connect(60)).statusCode, 201);
  const resumed = await deadline();
  assert.ok(resumed <= inS(61) && resumed > inS(30), 'resumed for the 60 s connect() asked');
  // Running: connect() lengthens its life, never shortens it.
  assert.equal((await connect(10)).statusCode, 200);
  assert.equal(await deadline(), resumed, 'not shortened');
  assert.equal((await connect(600)).statusCode, 200);
  assert.ok((await deadline()) > inS(500), 'lengthened');
  // Paused by forkd (its idle policy, unasked): its timeout ran on, and connect() does not
  // shorten it, as for a running sandbox.
  await fake.services.sandboxes.pause(SEED.sandbox);
  const ran = await deadline();
  assert.equal((await connect(10)).statusCode, 201);
  assert.equal(await deadline(), ran);
});
