/**
 * Resource limits at the API (docs/limits.md), over the fake services, which resolve them
 * with the real rules: every bad value is a `bad_request` naming the field and what is
 * allowed, on create and on fork; good ones come back in the Sandbox (SDK and CLI too),
 * a fork inherits and overrides them.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { cliOverFakes, out } from '../helpers/fake-cli.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';

const MiB = 1024 * 1024;
let app: FastifyInstance;
const fake = new FakeServices();

before(async () => {
  app = await buildApp(fake.services, { requireAuth: false });
});
after(() => app.close());

const post = (payload: object) => app.inject({ method: 'POST', url: '/v1/sandboxes', payload });

const BAD: [string, object, RegExp][] = [
  [
    'memory below guest RAM',
    { limits: { memory: '128M' } },
    /limits\.memory 128M is less than the guest's 256 MiB of RAM.*at least 256M/,
  ],
  ['unknown unit', { limits: { memory: '1Q' } }, /unknown unit "Q"; use K, M, G or T/],
  ['not a size', { limits: { memory: 'plenty' } }, /"plenty" is not a size/],
  ['empty memory', { limits: { memory: '' } }, /body\.limits\.memory/],
  ['cpu 0', { limits: { cpu: 0 } }, /body\.limits\.cpu: must be > 0/],
  ['cpu below 0', { limits: { cpu: -0.5 } }, /body\.limits\.cpu: must be > 0/],
  [
    'cpu above the host',
    { limits: { cpu: availableParallelism() + 1 } },
    /limits\.cpu \d+ is more than this host's \d+ cores/,
  ],
  ['cpu as text', { limits: { cpu: 'half' } }, /body\.limits\.cpu/],
  ['pids too few for QEMU', { limits: { pids: 4 } }, /body\.limits\.pids: must be >= 32/],
  ['pids fractional', { limits: { pids: 64.5 } }, /body\.limits\.pids/],
  ['unknown limit', { limits: { swap: '1G' } }, /body\.limits\.swap: unknown field/],
];

for (const [name, body, says] of BAD) {
  for (const fork of [false, true]) {
    test(`${fork ? 'fork' : 'create'} with ${name}: bad_request`, async () => {
      const res = await post(fork ? { ...body, snapshot: SEED.snapshot } : body);
      assert.equal(res.statusCode, 400, res.body);
      const { error } = res.json() as { error: { code: string; message: string } };
      assert.equal(error.code, 'bad_request');
      assert.match(error.message, says);
    });
  }
}

test('limits come back in the Sandbox; what is not named gets the default', async () => {
  const res = await post({ limits: { memory: '1.5G', cpu: 0.5 } });
  assert.equal(res.statusCode, 201, res.body);
  const sbx = res.json() as { id: string; limits: unknown };
  assert.deepEqual(sbx.limits, { memory_bytes: 1536 * MiB, cpu: 0.5, pids: 512, cgroup: 'v1' });
  const got = await app.inject(`/v1/sandboxes/${sbx.id}`);
  assert.deepEqual((got.json() as { limits: unknown }).limits, sbx.limits);
});

test('a fork overrides the limits it names and keeps the rest', async () => {
  const res = await post({ snapshot: SEED.snapshot, n: 2, limits: { pids: 64 } });
  assert.equal(res.statusCode, 201, res.body);
  const { sandboxes } = res.json() as { sandboxes: { limits: { pids: number; cpu: number } }[] };
  assert.equal(sandboxes.length, 2);
  for (const s of sandboxes) assert.deepEqual([s.limits.pids, s.limits.cpu], [64, 1]);
});

const cli = cliOverFakes('forkd-limits-');

test('the CLI sends its limit flags and shows the limits in ps and info', async () => {
  const created = await cli.json<{ id: string; limits: unknown }>(
    'create',
    '--memory-limit',
    '768M',
    '--cpu-limit',
    '0.5',
    '--pids-limit',
    '128',
  );
  assert.deepEqual(created.limits, { memory_bytes: 768 * MiB, cpu: 0.5, pids: 128, cgroup: 'v1' });
  const info = await cli.forkd('info', created.id);
  assert.equal(info.code, 0, info.stderr);
  assert.match(out(info), /limits\s+mem 768 MiB, cpu 0\.5, pids 128/);
  assert.match(out(info), /cgroup\s+v1/);
  const ps = await cli.forkd('ps');
  assert.match(out(ps), new RegExp(`${created.id}.*mem 768 MiB, cpu 0\\.5, pids 128`));
  const forked = await cli.json<{ sandboxes: { limits: { cpu: number } }[] }>(
    'fork',
    SEED.snapshot,
    '-n',
    '1',
    '--cpu-limit',
    '0.25',
  );
  assert.equal(forked.sandboxes[0]?.limits.cpu, 0.25);
});

test('PATCH changes the limits it names and keeps the rest; bad values are named', async () => {
  const { id } = (await post({ limits: { memory: '1G', cpu: 0.5 } })).json() as { id: string };
  const patch = (payload: object) =>
    app.inject({ method: 'PATCH', url: `/v1/sandboxes/${id}`, payload });
  const res = await patch({ limits: { cpu: 0.25, pids: 100 } });
  assert.equal(res.statusCode, 200, res.body);
  const { limits } = res.json() as { limits: unknown };
  assert.deepEqual(limits, { memory_bytes: 1024 * MiB, cpu: 0.25, pids: 100, cgroup: 'v1' });
  const bad = await patch({ limits: { memory: '128M' } });
  assert.equal(bad.statusCode, 400);
  assert.match(bad.body, /limits\.memory 128M is less than the guest's 256 MiB/);
  const empty = await patch({});
  assert.equal(empty.statusCode, 400);
  assert.equal((empty.json() as { error: { code: string } }).error.code, 'bad_request');
  const both = await patch({ limits: { cpu: 1 }, timeout_s: 600 });
  const after = both.json() as { limits: { cpu: number }; expires_at: string | null };
  assert.equal(after.limits.cpu, 1);
  assert.ok(after.expires_at && Date.parse(after.expires_at) > Date.now() + 590_000);
});

test('forkd update (the SDK setLimits) changes limits; with nothing to change it is a usage error', async () => {
  const created = await cli.json<{ id: string }>('create', '--cpu-limit', '0.5');
  const updated = await cli.json<{ limits: { cpu: number; pids: number } }>(
    'update',
    created.id,
    '--cpu-limit',
    '0.25',
    '--pids-limit',
    '64',
  );
  assert.deepEqual([updated.limits.cpu, updated.limits.pids], [0.25, 64]);
  const text = await cli.forkd('update', created.id, '--memory-limit', '900M');
  assert.equal(text.code, 0, text.stderr);
  assert.match(out(text), new RegExp(`^${created.id} limits mem 900 MiB, cpu 0\\.25, pids 64`));
  const nothing = await cli.forkd('update', created.id);
  assert.equal(nothing.code, 2);
  assert.match(nothing.stderr, /nothing to change/);
});
