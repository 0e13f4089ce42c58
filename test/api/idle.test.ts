/**
 * Idle tiers over the fake services (docs/idle.md): the pause and resume routes hand the
 * tier to the service and answer the Sandbox, reject what the contract does not take, and
 * any request to a paused sandbox wakes it; the SDK's `pause`/`resume` and the CLI's
 * `forkd pause`/`resume` and `ps` column say the same. The real QEMU side is
 * test/e2e/idle.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, SandboxNotFoundError, SandboxNotRunningError } from '@forkd/sdk';
import { buildApp } from '../../src/api/app.js';
import { ForkdError } from '../../src/errors.js';
import { cliOverFakes, out } from '../helpers/fake-cli.js';
import { SEED } from '../helpers/fake-services.js';

const { fake, env, forkd, json } = cliOverFakes('forkd-idle-');
const S = `/v1/sandboxes/${SEED.sandbox}`;
const config = () => ({ url: env.FORKD_URL });

const app = () => buildApp(fake.services, { requireAuth: false });

const tierOf = async (a: Awaited<ReturnType<typeof app>>) =>
  (JSON.parse((await a.inject(S)).body) as { tier: string }).tier;

test('pause and resume: the tier reaches the service; the answer is the Sandbox in its tier', async (t) => {
  fake.reset();
  const a = await app();
  t.after(() => a.close());
  const paused = await a.inject({ method: 'POST', url: `${S}/pause` });
  assert.equal(paused.statusCode, 200, paused.body);
  assert.equal(paused.json().tier, 'paused');
  assert.equal(paused.json().state, 'running');
  const again = await a.inject({ method: 'POST', url: `${S}/pause`, payload: { tier: 'paused' } });
  assert.equal(again.statusCode, 200, 'pausing a paused sandbox is not an error');
  const hib = await a.inject({
    method: 'POST',
    url: `${S}/pause`,
    payload: { tier: 'hibernated' },
  });
  assert.equal(hib.json().tier, 'hibernated');
  const pauses = fake.serviceCalls().filter((c) => c.method === 'pause');
  assert.deepEqual(
    pauses.map((c) => c.args),
    [
      [SEED.sandbox, { tier: undefined }],
      [SEED.sandbox, { tier: 'paused' }],
      [SEED.sandbox, { tier: 'hibernated' }],
    ],
  );
  const resumed = await a.inject({ method: 'POST', url: `${S}/resume` });
  assert.equal(resumed.statusCode, 200);
  assert.equal(resumed.json().tier, 'running');
  const twice = await a.inject({ method: 'POST', url: `${S}/resume` });
  assert.equal(twice.json().tier, 'running', 'resuming a running sandbox is a no-op');
});

test('pause rejects a tier it does not know, a body on resume, and unknown sandboxes', async (t) => {
  fake.reset();
  const a = await app();
  t.after(() => a.close());
  for (const payload of [{ tier: 'running' }, { tier: 'frozen' }, { tier: 'paused', x: 1 }]) {
    const r = await a.inject({ method: 'POST', url: `${S}/pause`, payload });
    assert.equal(r.statusCode, 400, JSON.stringify(payload));
    assert.equal(r.json().error.code, 'bad_request');
  }
  const body = await a.inject({ method: 'POST', url: `${S}/resume`, payload: { tier: 'x' } });
  assert.equal(body.json().error.code, 'bad_request');
  const missing = await a.inject({ method: 'POST', url: '/v1/sandboxes/sbx-000000000000/pause' });
  assert.equal(missing.statusCode, 404);
  assert.equal(missing.json().error.code, 'sandbox_not_found');
  await a.inject({ method: 'DELETE', url: S });
  const stopped = await a.inject({ method: 'POST', url: `${S}/pause` });
  assert.equal(stopped.json().error.code, 'sandbox_not_running');
});

test('any request to a paused sandbox wakes it: exec, files', async (t) => {
  fake.reset();
  const a = await app();
  t.after(() => a.close());
  await a.inject({ method: 'POST', url: `${S}/pause` });
  const ran = await a.inject({
    method: 'POST',
    url: `${S}/exec`,
    payload: { argv: ['echo', 'hi'] },
  });
  assert.equal(ran.statusCode, 200);
  assert.equal(await tierOf(a), 'running');
  await a.inject({ method: 'POST', url: `${S}/pause`, payload: { tier: 'hibernated' } });
  const read = await a.inject(`${S}/files?path=${encodeURIComponent(SEED.file)}`);
  assert.equal(read.statusCode, 200);
  assert.equal(await tierOf(a), 'running');
});

test('SDK: sandbox.pause() and resume() update info.tier; errors are typed', async () => {
  fake.reset();
  const sbx = await Sandbox.connect(SEED.sandbox, config());
  assert.equal(sbx.info.tier, 'running');
  assert.equal((await sbx.pause()).tier, 'paused');
  assert.equal(sbx.info.tier, 'paused');
  assert.equal((await sbx.pause({ tier: 'hibernated' })).tier, 'hibernated');
  assert.equal((await sbx.resume()).tier, 'running');
  assert.equal(sbx.info.tier, 'running');
  await sbx.kill();
  await assert.rejects(sbx.pause(), SandboxNotRunningError);
  fake.reset();
  const gone = await Sandbox.connect(SEED.sandbox, config());
  fake.failWith('sandboxes', 'resume', new ForkdError('sandbox_not_found', 'no sandbox'));
  await assert.rejects(gone.resume(), SandboxNotFoundError);
});

test('CLI: forkd pause [--hibernate] / resume print ID TIER; ps shows the tier; --json', async () => {
  fake.reset();
  const p = await forkd('pause', SEED.sandbox);
  assert.equal(p.code, 0, p.stderr.toString());
  assert.equal(out(p), `${SEED.sandbox} paused\n`);
  const ps = out(await forkd('ps'));
  assert.match(ps, /TIER/);
  assert.match(ps, new RegExp(`${SEED.sandbox}\\s+running\\s+paused`));
  const h = await json<{ tier: string; id: string }>('pause', SEED.sandbox, '--hibernate');
  assert.deepEqual([h.id, h.tier], [SEED.sandbox, 'hibernated']);
  assert.equal(out(await forkd('resume', SEED.sandbox)), `${SEED.sandbox} running\n`);
  const missing = await forkd('pause', 'sbx-000000000000');
  assert.equal(missing.code, 3, 'an unknown id exits 3');
  const bad = await forkd('resume', 'nope');
  assert.equal(bad.code, 2, 'a malformed id is a usage error');
});

type Idle = { pause_after_s: number | null; hibernate_after_s: number | null; source: string };

test('idle policy on create and fork: reaches the service, shows in the Sandbox, bad values refused', async (t) => {
  fake.reset();
  const a = await app();
  t.after(() => a.close());
  const create = (payload: object) => a.inject({ method: 'POST', url: '/v1/sandboxes', payload });
  const made = await create({ idle: { pause_after_s: 30 } });
  assert.equal(made.statusCode, 201, made.body);
  // The fake's daemon defaults are `--hibernate-idle-after 600`: they fill what is left out.
  assert.deepEqual(made.json().idle, {
    pause_after_s: 30,
    hibernate_after_s: 600,
    source: 'sandbox',
  });
  const creates = fake.serviceCalls().filter((c) => c.method === 'create');
  assert.deepEqual((creates[0]?.args[0] as { idle: unknown }).idle, { pause_after_s: 30 });
  const plain = await create({});
  assert.deepEqual(plain.json().idle, {
    pause_after_s: null,
    hibernate_after_s: 600,
    source: 'daemon',
  });
  const never = await create({ idle: { pause_after_s: 0, hibernate_after_s: null } });
  assert.deepEqual(never.json().idle, {
    pause_after_s: null,
    hibernate_after_s: null,
    source: 'sandbox',
  });

  const fork = await create({ snapshot: SEED.snapshot, n: 2, idle: { hibernate_after_s: 5 } });
  assert.equal(fork.statusCode, 201, fork.body);
  const kids = fork.json().sandboxes as { idle: Idle }[];
  assert.deepEqual(
    kids.map((k) => k.idle),
    [0, 1].map(() => ({ pause_after_s: null, hibernate_after_s: 5, source: 'sandbox' })),
  );

  for (const idle of [
    { pause_after_s: -1 },
    { pause_after_s: 1.5 },
    { pause_after_s: 7 * 24 * 3600 + 1 },
    { pause_after: 10 },
    { pause_after_s: '10' },
  ]) {
    const r = await create({ idle });
    assert.equal(r.statusCode, 400, JSON.stringify(idle));
    assert.equal(r.json().error.code, 'bad_request');
  }
  const order = await create({ idle: { pause_after_s: 60, hibernate_after_s: 60 } });
  assert.equal(order.statusCode, 400);
  assert.match(order.json().error.message, /must be larger than idle\.pause_after_s 60/);
  const overDefault = await create({ snapshot: SEED.snapshot, idle: { pause_after_s: 900 } });
  assert.equal(overDefault.statusCode, 400);
  assert.match(overDefault.json().error.message, /600 \(the daemon's default\)/);
});

test('SDK and CLI: the idle option in ms / flags in seconds; ps and info show the policy', async () => {
  fake.reset();
  const sbx = await Sandbox.create({ ...config(), idle: { pauseAfterMs: 1500 } });
  assert.deepEqual(sbx.info.idle, {
    pauseAfterMs: 2000,
    hibernateAfterMs: 600_000,
    source: 'sandbox',
  });
  const sent = fake.serviceCalls().find((c) => c.method === 'create');
  assert.deepEqual((sent?.args[0] as { idle: unknown }).idle, { pause_after_s: 2 });

  const made = await json<{ id: string; idle: Idle }>('create', '--pause-idle-after', '60');
  assert.deepEqual(made.idle, { pause_after_s: 60, hibernate_after_s: 600, source: 'sandbox' });
  const forked = await json<{ sandboxes: { idle: Idle }[] }>(
    'fork',
    SEED.snapshot,
    '--hibernate-idle-after',
    '0',
  );
  assert.deepEqual(forked.sandboxes[0]?.idle, {
    pause_after_s: null,
    hibernate_after_s: null,
    source: 'sandbox',
  });
  const bad = await forkd('create', '--pause-idle-after', '-1');
  assert.equal(bad.code, 2, 'a negative time is a usage error');
  assert.match(bad.stderr.toString(), /--pause-idle-after must be whole seconds/);
  const refused = await forkd('create', '--pause-idle-after', '700');
  assert.equal(refused.code, 2, refused.stderr.toString());
  assert.match(refused.stderr.toString(), /the daemon's default/);

  const plain = await json<{ id: string }>('create');
  const ps = out(await forkd('ps'));
  assert.match(ps, /IDLE/);
  assert.match(ps, new RegExp(`${made.id}\\s+running\\s+running\\s+pause 60s, hibernate 600s\\s`));
  assert.match(ps, new RegExp(`${plain.id}\\s+running\\s+running\\s+hibernate 600s \\(daemon\\)`));
  assert.match(out(await forkd('info', made.id)), /idle\s+pause 60s, hibernate 600s/);
});

test('PATCH idle: times left out keep their value, the order is checked, nothing changes on a refusal', async (t) => {
  fake.reset();
  const a = await app();
  t.after(() => a.close());
  const patch = (payload: object) => a.inject({ method: 'PATCH', url: S, payload });
  // The seed follows the daemon's defaults (hibernate 600): a change makes the policy its own.
  const paused = await patch({ idle: { pause_after_s: 30 } });
  assert.equal(paused.statusCode, 200, paused.body);
  assert.deepEqual(paused.json().idle, {
    pause_after_s: 30,
    hibernate_after_s: 600,
    source: 'sandbox',
  });
  const updates = fake.serviceCalls().filter((c) => c.method === 'update');
  assert.deepEqual(updates[0]?.args, [SEED.sandbox, { idle: { pause_after_s: 30 } }]);
  const later = await patch({ idle: { hibernate_after_s: 0 } });
  assert.deepEqual(later.json().idle, {
    pause_after_s: 30,
    hibernate_after_s: null,
    source: 'sandbox',
  });

  const order = await patch({ idle: { hibernate_after_s: 20 } });
  assert.equal(order.statusCode, 400);
  assert.equal(order.json().error.code, 'bad_request');
  assert.match(
    order.json().error.message,
    /idle\.hibernate_after_s 20 must be larger than idle\.pause_after_s 30 \(its current policy\)/,
  );
  // Refused as a whole: the limits and timeout of the same request are not applied.
  const before = (await a.inject(S)).json();
  const mixed = await patch({
    limits: { cpu: 0.25 },
    timeout_s: 60,
    idle: { pause_after_s: 60, hibernate_after_s: 60 },
  });
  assert.equal(mixed.statusCode, 400);
  assert.deepEqual((await a.inject(S)).json(), before, 'nothing changed');
  for (const idle of [{ pause_after_s: -1 }, { pause_after_s: 2.5 }, { pause: 1 }, 'never']) {
    const r = await patch({ idle });
    assert.equal(r.statusCode, 400, JSON.stringify(idle));
    assert.equal(r.json().error.code, 'bad_request');
  }
  // null: its own policy dropped, the daemon's defaults again (and a change after counts from them).
  const dropped = await patch({ idle: null });
  assert.equal(dropped.statusCode, 200, dropped.body);
  assert.deepEqual(dropped.json().idle, {
    pause_after_s: null,
    hibernate_after_s: 600,
    source: 'daemon',
  });
  assert.deepEqual(fake.serviceCalls().at(-1)?.args, [SEED.sandbox, { idle: null }]);
  const fromDefaults = await patch({ idle: { pause_after_s: 10 } });
  assert.deepEqual(fromDefaults.json().idle.hibernate_after_s, 600);
  await a.inject({ method: 'POST', url: `${S}/pause`, payload: { tier: 'hibernated' } });
  const stillPaused = await patch({ idle: { pause_after_s: 5, hibernate_after_s: 50 } });
  assert.equal(stillPaused.json().tier, 'hibernated', 'a paused sandbox keeps its tier');
  assert.equal((await patch({ idle: null })).json().tier, 'hibernated');
  await a.inject({ method: 'DELETE', url: S });
  const stopped = await patch({ idle: { pause_after_s: 5 } });
  assert.equal(stopped.json().error.code, 'sandbox_not_running');
});

test('SDK setIdle / update and CLI forkd update --pause-idle-after: one PATCH each', async () => {
  fake.reset();
  const sbx = await Sandbox.connect(SEED.sandbox, config());
  const info = await sbx.setIdle({ pauseAfterMs: 1500 });
  assert.deepEqual(info.idle, { pauseAfterMs: 2000, hibernateAfterMs: 600_000, source: 'sandbox' });
  assert.deepEqual(sbx.info.idle, info.idle);
  await sbx.update({ idle: { hibernateAfterMs: null }, limits: { pids: 96 }, timeoutMs: 90_000 });
  assert.deepEqual(sbx.info.idle?.hibernateAfterMs, null);
  assert.equal(sbx.info.limits?.pids, 96);
  const sent = fake.serviceCalls().filter((c) => c.method === 'update');
  assert.deepEqual(sent.at(-1)?.args[1], {
    limits: { pids: 96 },
    idle: { hibernate_after_s: null },
    timeout_s: 90,
  });
  await assert.rejects(sbx.setIdle({ hibernateAfterMs: 1000 }), /its current policy/);
  const back = await sbx.setIdle(null);
  assert.deepEqual(back.idle, { pauseAfterMs: null, hibernateAfterMs: 600_000, source: 'daemon' });
  assert.deepEqual(fake.serviceCalls().at(-1)?.args[1], { idle: null });

  fake.reset();
  const text = out(await forkd('update', SEED.sandbox, '--pause-idle-after', '45'));
  assert.equal(text, `${SEED.sandbox} idle pause 45s, hibernate 600s\n`);
  const j = await json<{ idle: Idle }>('update', SEED.sandbox, '--hibernate-idle-after', '0');
  assert.deepEqual(j.idle, { pause_after_s: 45, hibernate_after_s: null, source: 'sandbox' });
  assert.equal(fake.serviceCalls().filter((c) => c.method === 'update').length, 2);
  const bad = await forkd('update', SEED.sandbox, '--pause-idle-after', 'soon');
  assert.equal(bad.code, 2);
  const refused = await forkd('update', SEED.sandbox, '--hibernate-idle-after', '10');
  assert.equal(refused.code, 2, refused.stderr.toString());
  assert.match(refused.stderr.toString(), /its current policy/);
  const daemons = out(await forkd('update', SEED.sandbox, '--daemon-idle'));
  assert.equal(daemons, `${SEED.sandbox} idle hibernate 600s (daemon)\n`);
  const both = await forkd('update', SEED.sandbox, '--daemon-idle', '--pause-idle-after', '5');
  assert.equal(both.code, 2);
  assert.match(both.stderr.toString(), /--daemon-idle drops the idle times/);

  // A branch's --fork children take the same flags; without --fork they are a usage error.
  const branched = await json<{ children: { sandboxes: { idle: Idle }[] } }>(
    'branch',
    SEED.sandbox,
    '--fork',
    '1',
    '--pause-idle-after',
    '20',
  );
  assert.equal(branched.children.sandboxes[0]?.idle.pause_after_s, 20);
  const alone = await forkd('branch', SEED.sandbox, '--pause-idle-after', '20');
  assert.equal(alone.code, 2);
  assert.match(alone.stderr.toString(), /only with --fork/);
});
