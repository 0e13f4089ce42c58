/**
 * The E2B listener's shapes over fake services (inject, no sockets): what the control
 * plane maps onto which service call, E2B's `{code, message}` errors, API keys and envd
 * access tokens, /files (multipart, raw, gzip), /health, and Connect-RPC JSON for
 * process.Process and filesystem.Filesystem — envelopes, end-of-stream errors, unary errors.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { startDaemon } from '../../src/daemon/daemon.js';
import { isForkdError } from '../../src/errors.js';
import { e2bOverFakes, ID } from '../helpers/e2b-inject.js';
import { SEED } from '../helpers/fake-services.js';

const e2b = e2bOverFakes();
const { fake, control, envd, rpc, callsOf } = e2b;

/** One Connect envelope (flags 0) around a JSON message. */
function envelope(message: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** A stream answer's envelopes: [flags, message]. */
function envelopes(body: Buffer): [number, Record<string, unknown>][] {
  const out: [number, Record<string, unknown>][] = [];
  for (let at = 0; at < body.length;) {
    const len = body.readUInt32BE(at + 1);
    out.push([body[at] as number, JSON.parse(body.subarray(at + 5, at + 5 + len).toString())]);
    at += 5 + len;
  }
  return out;
}

const stream = (method: string, message: unknown, headers: Record<string, string> = {}) =>
  envd({
    method: 'POST',
    url: `/process.Process/${method}`,
    headers: { 'content-type': 'application/connect+json', ...headers },
    payload: envelope(message),
  });

test('create from a snapshot tag forks it with metadata, envs and the timeout', async () => {
  const r = await control({
    method: 'POST',
    url: '/v2/sandboxes',
    payload: {
      templateID: SEED.snapshot,
      metadata: { suite: 'e2b' },
      envVars: { A: '1' },
      timeout: 60,
      autoPause: false,
      secure: true,
    },
  });
  assert.equal(r.statusCode, 201);
  const body = r.json();
  assert.match(body.sandboxID, /^[a-z0-9]+$/);
  assert.equal(body.templateID, SEED.snapshot);
  assert.equal(body.envdVersion, '0.6.4');
  assert.ok(body.envdAccessToken.startsWith(`${body.sandboxID}.`));
  assert.deepEqual(callsOf('snapshots', 'fork')[0]?.[0], {
    snapshot: SEED.snapshot,
    n: 1,
    timeout_s: 60,
    labels: { suite: 'e2b' },
    env: { A: '1' },
  });
});

test('a template that is no snapshot boots the image of that name (POST /sandboxes)', async () => {
  const r = await control({ method: 'POST', url: '/sandboxes', payload: { templateID: 'base' } });
  assert.equal(r.statusCode, 201);
  assert.deepEqual(callsOf('sandboxes', 'create')[0]?.[0], { image: 'base', timeout_s: 300 });
});

test('errors come as {code, message} with the HTTP status', async () => {
  const missing = await control({
    method: 'POST',
    url: '/sandboxes',
    payload: { templateID: 'nope' },
  });
  assert.equal(missing.statusCode, 404);
  assert.equal(missing.json().code, 404);
  assert.match(missing.json().message, /no snapshot tag or image/);

  const noKey = await e2b.app.inject({ method: 'GET', url: `/sandboxes/${ID}` });
  assert.deepEqual(
    [noKey.statusCode, noKey.json().code, /E2B_API_KEY/.test(noKey.json().message)],
    [401, 401, true],
  );
  const wrongKey = await control({
    method: 'GET',
    url: `/sandboxes/${ID}`,
    headers: { 'x-api-key': 'wrong' },
  });
  assert.equal(wrongKey.statusCode, 401);

  for (const payload of [
    { templateID: SEED.snapshot, volumeMounts: [{ name: 'v', path: '/v' }] },
    { templateID: SEED.snapshot, network: { maskRequestHost: 'h' } },
    { templateID: SEED.snapshot, timeout: 1.5 },
    { templateID: SEED.snapshot, metadata: { a: 1 } },
    {},
  ]) {
    const r = await control({ method: 'POST', url: '/v2/sandboxes', payload });
    assert.equal(r.statusCode, 400, JSON.stringify(payload));
    assert.equal(r.json().code, 400);
  }
  const route = await control({ method: 'GET', url: '/templates' });
  assert.deepEqual([route.statusCode, route.json().code], [404, 404]);
});

test('network options become the egress policy', async () => {
  const cases: [Record<string, unknown>, unknown][] = [
    [{ allow_internet_access: false }, 'none'],
    [
      { network: { allowOut: ['1.1.1.1'], denyOut: ['0.0.0.0/0'] } },
      { allow_internet: false, allow_out: ['1.1.1.1'] },
    ],
    [{ network: { denyOut: ['10.0.0.0/8'] } }, { deny_out: ['10.0.0.0/8'] }],
    [{ allow_internet_access: true }, undefined],
  ];
  for (const [extra, egress] of cases) {
    fake.reset();
    const payload = { templateID: SEED.snapshot, ...extra };
    const r = await control({ method: 'POST', url: '/v2/sandboxes', payload });
    assert.equal(r.statusCode, 201);
    assert.deepEqual((callsOf('snapshots', 'fork')[0]?.[0] as { egress?: unknown }).egress, egress);
  }
});

test('get, list with metadata and state filters, set timeout, kill twice', async () => {
  const info = (await control({ method: 'GET', url: `/sandboxes/${ID}` })).json();
  assert.equal(info.sandboxID, ID);
  assert.equal(info.state, 'running');
  assert.equal(info.cpuCount, 1);
  assert.equal(info.memoryMB, 256);
  assert.equal(typeof info.endAt, 'string');

  const made = await control({
    method: 'POST',
    url: '/v2/sandboxes',
    payload: { templateID: SEED.snapshot, metadata: { team: 'a b' } },
  });
  const wanted = encodeURIComponent(new URLSearchParams({ team: 'a b' }).toString());
  const listed = await control({ method: 'GET', url: `/v2/sandboxes?metadata=${wanted}` });
  assert.deepEqual(
    listed.json().map((s: { sandboxID: string }) => s.sandboxID),
    [made.json().sandboxID],
  );
  assert.deepEqual(listed.json()[0].metadata, { team: 'a b' });
  const paused = await control({ method: 'GET', url: '/v2/sandboxes?state=paused' });
  assert.deepEqual(paused.json(), []);

  const t = await control({
    method: 'POST',
    url: `/sandboxes/${ID}/timeout`,
    payload: { timeout: 90 },
  });
  assert.equal(t.statusCode, 204);
  assert.deepEqual(callsOf('sandboxes', 'extend')[0], [SEED.sandbox, 90]);

  assert.equal((await control({ method: 'DELETE', url: `/sandboxes/${ID}` })).statusCode, 204);
  const again = await control({ method: 'DELETE', url: `/sandboxes/${ID}` });
  assert.deepEqual([again.statusCode, again.json().code], [404, 404]);
  assert.equal((await control({ method: 'GET', url: `/sandboxes/${ID}` })).statusCode, 404);
  const bogus = await control({ method: 'GET', url: '/sandboxes/not-an-id' });
  assert.equal(bogus.statusCode, 404);
});

test('connect answers the envd address; both connect paths, the timeout applied', async () => {
  for (const url of [`/sandboxes/${ID}/connect`, `/v2/sandboxes/${ID}/connect`]) {
    fake.reset();
    const r = await control({ method: 'POST', url, payload: { timeout: 120 } });
    assert.equal(r.statusCode, 200);
    assert.equal(r.json().sandboxID, ID);
    assert.equal(r.json().envdAccessToken, e2b.token);
    assert.deepEqual(callsOf('sandboxes', 'extend')[0], [SEED.sandbox, 120]);
  }
});

test('envd needs the access token; /health does not, and says 502 once the sandbox is gone', async () => {
  const noToken = await e2b.app.inject({
    method: 'GET',
    url: `/files?path=${SEED.file}`,
    headers: { 'e2b-sandbox-id': ID },
  });
  assert.deepEqual([noToken.statusCode, noToken.json().code], [401, 401]);
  const health = await e2b.app.inject({
    method: 'GET',
    url: '/health',
    headers: { 'e2b-sandbox-id': ID },
  });
  assert.equal(health.statusCode, 204);
  await fake.services.sandboxes.kill(SEED.sandbox);
  const gone = await e2b.app.inject({
    method: 'GET',
    url: '/health',
    headers: { 'e2b-sandbox-id': ID },
  });
  assert.equal(gone.statusCode, 502);
});

test("/files: download, multipart and raw (gzip) uploads, relative paths from the user's home (root: /root)", async () => {
  const read = await envd({ method: 'GET', url: `/files?path=${SEED.file}` });
  assert.equal(read.statusCode, 200);
  assert.equal(read.body, SEED.fileBytes.toString());
  // SDKs before 2.8 send no E2b-Sandbox-Id on /files: the access token names the sandbox.
  const byToken = await e2b.app.inject({
    method: 'GET',
    url: `/files?path=${SEED.file}`,
    headers: { 'x-access-token': e2b.token },
  });
  assert.equal(byToken.statusCode, 200);
  const missing = await envd({ method: 'GET', url: '/files?path=/nope' });
  assert.deepEqual([missing.statusCode, missing.json().code], [404, 404]);

  const form = new FormData();
  form.append('file', new Blob(['one']), '/tmp/a.txt');
  form.append('file', new Blob(['two']), 'rel/b.txt');
  const req = new Request('http://x/', { method: 'POST', body: form });
  const multipart = await envd({
    method: 'POST',
    url: '/files',
    headers: { 'content-type': req.headers.get('content-type') as string },
    payload: Buffer.from(await req.arrayBuffer()),
  });
  assert.equal(multipart.statusCode, 200);
  assert.deepEqual(multipart.json(), [
    { name: 'a.txt', type: 'file', path: '/tmp/a.txt' },
    { name: 'b.txt', type: 'file', path: '/root/rel/b.txt' },
  ]);
  assert.equal((await envd({ method: 'GET', url: '/files?path=rel/b.txt' })).body, 'two');

  const raw = await envd({
    method: 'POST',
    url: '/files?path=/tmp/z.txt',
    headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
    payload: gzipSync('zipped'),
  });
  assert.equal(raw.statusCode, 200);
  assert.equal((await envd({ method: 'GET', url: '/files?path=/tmp/z.txt' })).body, 'zipped');
  const bad = await envd({
    method: 'POST',
    url: '/files',
    headers: { 'content-type': 'multipart/form-data; boundary=x' },
    payload: 'garbage',
  });
  assert.deepEqual([bad.statusCode, bad.json().code], [400, 400]);
});

test('process.Process/Start streams start, output and the end in envelopes', async () => {
  const r = await stream(
    'Start',
    { process: { cmd: 'echo', args: ['hi'], envs: { A: '1' }, cwd: '/tmp' }, stdin: false },
    { 'keepalive-ping-interval': '30' },
  );
  assert.equal(r.statusCode, 200);
  assert.equal(r.headers['content-type'], 'application/connect+json');
  const msgs = envelopes(r.rawPayload);
  assert.deepEqual(msgs[0], [0, { event: { start: { pid: 100 } } }]);
  assert.deepEqual(msgs[1], [
    0,
    { event: { data: { stdout: Buffer.from('hi\n').toString('base64') } } },
  ]);
  assert.deepEqual(msgs[2], [
    0,
    { event: { end: { exitCode: 0, exited: true, status: 'exit status 0' } } },
  ]);
  assert.deepEqual(msgs[3], [2, {}]);
  assert.deepEqual(callsOf('sandboxes', 'execStream')[0]?.[1], {
    argv: ['echo', 'hi'],
    stream: true,
    env: { A: '1' },
    cwd: '/tmp',
  });

  const failed = envelopes((await stream('Start', { process: { cmd: 'missing' } })).rawPayload);
  assert.equal(failed.length, 1);
  assert.equal(failed[0]?.[0], 2);
  assert.equal((failed[0]?.[1].error as { code: string }).code, 'failed_precondition');
  const connect = envelopes((await stream('Connect', { process: { pid: 4 } })).rawPayload);
  assert.equal((connect[0]?.[1].error as { code: string }).code, 'not_found');
});

test('a running command: List, SendInput, CloseStdin, SendSignal by pid, non-zero exits', async () => {
  const running = stream('Start', { process: { cmd: 'sleep' }, tag: 't1' });
  for (let i = 0; i < 100 && !fake.calls.some((c) => c.method === 'execStream'); i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  await new Promise((r) => setTimeout(r, 30));
  const list = await rpc('process.Process/List', {});
  assert.deepEqual(list.json().processes, [
    { config: { cmd: 'sleep', args: [], envs: {} }, pid: 100, tag: 't1' },
  ]);
  const input = { process: { pid: 100 }, input: { stdin: Buffer.from('x').toString('base64') } };
  assert.equal((await rpc('process.Process/SendInput', input)).statusCode, 200);
  assert.equal(
    (await rpc('process.Process/CloseStdin', { process: { tag: 't1' } })).statusCode,
    200,
  );
  const signal = { process: { pid: 100 }, signal: 'SIGNAL_SIGKILL' };
  assert.equal((await rpc('process.Process/SendSignal', signal)).statusCode, 200);
  const end = envelopes((await running).rawPayload).at(-2)?.[1];
  assert.deepEqual(end, {
    event: { end: { exitCode: -1, exited: false, status: 'signal: kill' } },
  });
  const [execId] = callsOf('sandboxes', 'writeStdin').map((a) => a[1]);
  assert.deepEqual(
    callsOf('sandboxes', 'writeStdin').map((a) => [a[1], String(a[2]), a[3]]),
    [
      [execId, 'x', false],
      [execId, '', true],
    ],
  );
  const gone = await rpc('process.Process/SendSignal', signal);
  assert.deepEqual([gone.statusCode, gone.json().code], [404, 'not_found']);

  const exit = envelopes(
    (await stream('Start', { process: { cmd: 'sh', args: ['exit 3'] } })).rawPayload,
  );
  assert.equal((exit.at(-2)?.[1].event as { end: { exitCode: number } }).end.exitCode, 3);
});

test('filesystem.Filesystem: Stat, ListDir, MakeDir, Remove as Connect JSON', async () => {
  const stat = await rpc('filesystem.Filesystem/Stat', { path: SEED.file });
  assert.equal(stat.statusCode, 200);
  const entry = stat.json().entry;
  assert.equal(entry.type, 'FILE_TYPE_FILE');
  assert.equal(entry.path, SEED.file);
  assert.equal(entry.size, String(SEED.fileBytes.length));
  assert.match(entry.permissions, /^-[rwx-]{9}$/);
  assert.ok(!Number.isNaN(Date.parse(entry.modifiedTime)));

  const list = await rpc('filesystem.Filesystem/ListDir', { path: '/etc', depth: 1 });
  assert.deepEqual(
    list.json().entries.map((e: { path: string }) => e.path),
    [SEED.file],
  );
  const exists = await rpc('filesystem.Filesystem/MakeDir', { path: '/etc' });
  assert.deepEqual([exists.statusCode, exists.json().code], [409, 'already_exists']);
  const made = await rpc('filesystem.Filesystem/MakeDir', { path: '/srv/new' });
  assert.equal(made.json().entry.type, 'FILE_TYPE_DIRECTORY');
  assert.equal((await rpc('filesystem.Filesystem/Remove', { path: SEED.file })).statusCode, 200);
  const missing = await rpc('filesystem.Filesystem/Stat', { path: SEED.file });
  assert.deepEqual([missing.statusCode, missing.json().code], [404, 'not_found']);
  const noPath = await rpc('filesystem.Filesystem/Stat', {});
  assert.deepEqual([noPath.statusCode, noPath.json().code], [400, 'invalid_argument']);
  const watch = envelopes(
    (
      await envd({
        method: 'POST',
        url: '/filesystem.Filesystem/WatchDir',
        headers: { 'content-type': 'application/connect+json' },
        payload: envelope({ path: SEED.file }),
      })
    ).rawPayload,
  );
  // Removed above: watching what is not there fails before the stream starts.
  assert.equal((watch[0]?.[1].error as { code: string }).code, 'not_found');
});

test('a PTY session: Start with pty opens a terminal with the envs; input, resize, exit by pid', async () => {
  const running = stream('Start', {
    process: { cmd: '/bin/bash', args: ['-i', '-l'], envs: { ABC: "it's" } },
    pty: { size: { cols: 100, rows: 30 } },
  });
  for (let i = 0; i < 100 && !fake.calls.some((c) => c.method === 'pty'); i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  await new Promise((r) => setTimeout(r, 30));
  const [, req] = callsOf('sandboxes', 'pty')[0] ?? [];
  assert.deepEqual(req, {
    cols: 100,
    rows: 30,
    cmd: `exec env 'ABC=it'\\''s' '/bin/bash' '-i' '-l'`,
  });
  const send = (input: Record<string, unknown>) =>
    rpc('process.Process/SendInput', { process: { pid: 100 }, input });
  assert.equal((await send({ pty: Buffer.from('hi\n').toString('base64') })).statusCode, 200);
  const resize = { process: { pid: 100 }, pty: { size: { cols: 120, rows: 40 } } };
  assert.equal((await rpc('process.Process/Update', resize)).statusCode, 200);
  await send({ pty: Buffer.from('exit 0\n').toString('base64') });
  const msgs = envelopes((await running).rawPayload);
  assert.deepEqual(msgs[0], [0, { event: { start: { pid: 100 } } }]);
  const out = msgs
    .map(([, m]) => (m.event as { data?: { pty?: string } } | undefined)?.data?.pty)
    .filter((d): d is string => d !== undefined)
    .map((d) => Buffer.from(d, 'base64').toString())
    .join('');
  assert.match(out, /hi/);
  assert.match(out, /\[size 120x40\]/);
  assert.deepEqual(msgs.at(-2)?.[1], {
    event: { end: { exitCode: 0, exited: true, status: 'exit status 0' } },
  });
});

test('signed URLs: a /files request with only a valid signature reaches its sandbox; expired or wrong is 401', async () => {
  const { fileSignature } = await import('../../src/api/e2b/signing.js');
  const url = (path: string, sig: string, exp?: number) =>
    `/files?path=${encodeURIComponent(path)}&signature=${encodeURIComponent(sig)}` +
    (exp === undefined ? '' : `&signature_expiration=${exp}`);
  const later = Math.floor(Date.now() / 1000) + 60;
  const ok = await e2b.app.inject({
    method: 'GET',
    url: url(SEED.file, fileSignature(SEED.file, 'read', '', e2b.token, later), later),
  });
  assert.equal(ok.statusCode, 200, ok.body);
  assert.equal(ok.body, SEED.fileBytes.toString());
  const past = later - 120;
  const expired = await e2b.app.inject({
    method: 'GET',
    url: url(SEED.file, fileSignature(SEED.file, 'read', '', e2b.token, past), past),
  });
  assert.deepEqual(
    [expired.statusCode, expired.json()],
    [401, { code: 401, message: 'signature is already expired' }],
  );
  const asWrite = fileSignature(SEED.file, 'write', '', e2b.token);
  assert.equal(
    (await e2b.app.inject({ method: 'GET', url: url(SEED.file, asWrite) })).statusCode,
    401,
  );
});

test('the daemon refuses --e2b-listen without a token file, before it claims anything', async () => {
  await assert.rejects(
    startDaemon({
      home: '/nonexistent/forkd-e2b-home',
      e2bListen: '127.0.0.1:0',
      logLevel: 'silent',
    }),
    (e: unknown) => isForkdError(e, 'bad_request') && /token-file/.test(e.message),
  );
});

test('E2B mutations are audited under the API key id, with the forkd sandbox id', async () => {
  await control({ method: 'POST', url: `/sandboxes/${ID}/timeout`, payload: { timeout: 60 } });
  const entry = fake.audit.at(-1);
  assert.equal(entry?.principal, 'e2b');
  assert.equal(entry?.target, SEED.sandbox);
  assert.equal(entry?.status, 204);
});

test('file metadata: X-Metadata-* headers become user.e2b.* xattrs and come back as metadata; bad ones are 400', async () => {
  const { metadataXattrs, metadataOf, entryInfo } = await import('../../src/api/e2b/filesystem.js');
  assert.deepEqual(metadataXattrs({ 'x-metadata-author': 'mish', 'content-type': 'x' }), {
    'user.e2b.author': 'mish',
  });
  assert.equal(metadataXattrs({ accept: '*/*' }), undefined);
  assert.throws(() => metadataXattrs({ 'x-metadata-a': 'bad\u00e9' }), /printable US-ASCII/);
  assert.throws(() => metadataXattrs({ 'x-metadata-': 'v' }), /HTTP tokens/);
  assert.deepEqual(metadataOf({ 'user.e2b.tag': 'x', 'user.other': 'y' }), { tag: 'x' });
  assert.equal(metadataOf({ 'user.other': 'y' }), undefined);
  const stat = { name: 'l', kind: 'symlink' as const, size: 1, mode: 0o777, mtime_ms: 0 };
  const link = entryInfo({ ...stat, target: '../a.txt' }, '/home/user/d/l');
  assert.equal(link.symlinkTarget, '/home/user/a.txt');
  assert.equal('metadata' in link, false);
});

test('getMetrics: one sample of now, within the asked range or none', async () => {
  const { metricsOf } = await import('../../src/api/e2b/metrics.js');
  const now = Date.parse('2026-12-04T12:00:00Z');
  const s = {
    created_at: '2026-12-04T11:59:00Z',
    cpus: 2,
    memory_mib: 512,
    usage: { cpu_seconds: 12, memory_bytes: 300 * 2 ** 20, throttled_seconds: 0, oom_kills: 0 },
  } as unknown as Parameters<typeof metricsOf>[0];
  const [m] = metricsOf(s, {}, now);
  assert.deepEqual(
    [m?.cpuCount, m?.memTotal, m?.memUsed, m?.cpuUsedPct, m?.timestamp],
    [2, 512 * 2 ** 20, 300 * 2 ** 20, 10, '2026-12-04T12:00:00.000Z'],
  );
  const sec = (ms: number) => String(Math.round(ms / 1000));
  assert.equal(metricsOf(s, { start: sec(now - 5000), end: sec(now) }, now).length, 1);
  assert.deepEqual(
    metricsOf(s, { start: sec(now - 3_600_000), end: sec(now - 1_800_000) }, now),
    [],
  );
  assert.deepEqual(metricsOf(s, { start: sec(now + 60_000) }, now), []);
});
