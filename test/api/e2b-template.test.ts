/**
 * The E2B listener's template build routes over fake services (inject, no sockets): a
 * build requested under a name, the upload link of a COPY archive (signed, on the listener
 * itself, `present` once stored), the build started with its steps and handed to the build
 * service, its status and log as the SDK polls them, names that exist, and refusals in
 * E2B's `{code, message}` shape.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { buildE2bApp } from '../../src/api/e2b/app.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';

const KEY = 'e2b-api-key-0123456789abcdef';
const HASH = 'b'.repeat(64);
const fake = new FakeServices();
let app: FastifyInstance;
let dir: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'forkd-e2b-tpl-api-'));
  app = await buildE2bApp(fake.services, {
    tokens: new Map([[KEY, 'e2b']]),
    templateFiles: join(dir, 'files'),
  });
});

after(() => rm(dir, { recursive: true, force: true }));

const control = (opts: InjectOptions) =>
  app.inject({ ...opts, headers: { 'x-api-key': KEY, ...opts.headers } });

async function archive(): Promise<Buffer> {
  await writeFile(join(dir, 'hello.txt'), 'hi\n');
  execFileSync('tar', ['-czf', join(dir, 'up.tgz'), '-C', dir, 'hello.txt']);
  return readFile(join(dir, 'up.tgz'));
}

async function requestBuild(name = 'web'): Promise<string> {
  const r = await control({
    method: 'POST',
    url: '/v3/templates',
    payload: { name, cpuCount: 2, memoryMB: 512 },
  });
  assert.equal(r.statusCode, 202, r.body);
  const body = r.json();
  assert.equal(body.templateID, name);
  assert.deepEqual(body.names, [name]);
  return body.buildID as string;
}

test('request, upload, start, poll: the build service gets the name, size and steps', async () => {
  const buildID = await requestBuild();
  const link = await control({ method: 'GET', url: `/templates/web/files/${HASH}` });
  assert.equal(link.statusCode, 200, link.body);
  assert.equal(link.json().present, false);
  const url = new URL(link.json().url as string);
  assert.equal(url.pathname, `/e2b/template-files/${HASH}`);

  const payload = await archive();
  const forged = await app.inject({ method: 'PUT', url: `${url.pathname}?token=x`, payload });
  assert.equal(forged.statusCode, 401);
  assert.equal(forged.json().code, 401);
  const put = await app.inject({ method: 'PUT', url: `${url.pathname}${url.search}`, payload });
  assert.equal(put.statusCode, 200, put.body);
  const again = await control({ method: 'GET', url: `/templates/web/files/${HASH}` });
  assert.deepEqual(again.json(), { present: true });

  fake.calls.length = 0;
  const started = await control({
    method: 'POST',
    url: `/v2/templates/web/builds/${buildID}`,
    payload: {
      fromTemplate: SEED.snapshot,
      steps: [
        { type: 'COPY', args: ['hello.txt', '/app/', '', ''], filesHash: HASH, force: false },
        { type: 'RUN', args: ['cat /app/hello.txt'], force: true },
      ],
      startCmd: 'sleep 1000',
      readyCmd: 'sleep 1',
    },
  });
  assert.equal(started.statusCode, 202, started.body);
  let status: Record<string, unknown> = {};
  for (let i = 0; i < 100 && status.status !== 'ready'; i++) {
    await new Promise((r) => setTimeout(r, 20));
    const r = await control({
      method: 'GET',
      url: `/templates/web/builds/${buildID}/status?logsOffset=0`,
    });
    status = r.json();
  }
  assert.equal(status.status, 'ready', JSON.stringify(status));
  const messages = (status.logEntries as { message: string }[]).map((e) => e.message);
  assert.ok(messages.includes('[1/1] RUN true'), messages.join('\n'));
  const call = fake.calls.find((c) => c.service === 'builds' && c.method === 'build');
  assert.deepEqual(call?.args[0], {
    tag: 'web',
    no_cache: false,
    no_cache_from: 2,
    cpus: 2,
    memory_mib: 512,
  });
  const past = await control({
    method: 'GET',
    url: `/templates/web/builds/${buildID}/status?logsOffset=1000`,
  });
  assert.deepEqual(past.json().logEntries, []);

  const twice = await control({ method: 'POST', url: `/v2/templates/web/builds/${buildID}` });
  assert.equal(twice.statusCode, 409);
});

test('refusals name what forkd cannot do; names exist when their snapshot does', async () => {
  const tags = await control({ method: 'POST', url: '/v3/templates', payload: { name: 'a:v1' } });
  assert.equal(tags.statusCode, 400);
  assert.match(tags.json().message, /template tags \(v1\) are not supported/);
  const badName = await control({ method: 'POST', url: '/v3/templates', payload: { name: 'A B' } });
  assert.match(badName.json().message, /not a forkd snapshot tag/);

  const buildID = await requestBuild('other');
  const missing = await control({
    method: 'POST',
    url: `/v2/templates/other/builds/${buildID}`,
    payload: {
      fromImage: 'busybox',
      steps: [{ type: 'COPY', args: ['x', '/x'], filesHash: 'c'.repeat(64) }],
    },
  });
  assert.equal(missing.statusCode, 400);
  assert.match(missing.json().message, /were not uploaded/);
  const creds = await control({
    method: 'POST',
    url: `/v2/templates/other/builds/${buildID}`,
    payload: { fromImage: 'x', fromImageRegistry: { type: 'registry', username: 'u' } },
  });
  assert.match(creds.json().message, /registry credentials.*not supported/);
  const unknown = await control({ method: 'GET', url: `/templates/other/builds/nope/status` });
  assert.equal(unknown.statusCode, 404);

  const exists = await control({ method: 'GET', url: `/templates/aliases/${SEED.snapshot}` });
  assert.deepEqual(exists.json(), { templateID: SEED.snapshot, public: false });
  const none = await control({ method: 'GET', url: '/templates/aliases/nothing-here' });
  assert.equal(none.statusCode, 404);
  const noKey = await app.inject({ method: 'POST', url: '/v3/templates', payload: { name: 'x' } });
  assert.equal(noKey.statusCode, 401);
});
