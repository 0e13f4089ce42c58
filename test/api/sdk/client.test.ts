/**
 * The SDK against a tiny daemon speaking the REST contract (fake-daemon.ts: node:http on a
 * unix socket or TCP). The fake checks every request the SDK sends against the schemas of
 * src/contract/schemas.ts, so request bodies and queries cannot drift either; it also lets the
 * tests shape what the real daemon rarely does on cue (slow streams, a UTF-8 character cut
 * between chunks, a dropped connection, 503 with Retry-After, a proxy's HTML).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  BadRequestError,
  CapacityError,
  DaemonUnreachableError,
  Forkd,
  GuestErrorError,
  Sandbox,
  SandboxNotFoundError,
  UnauthorizedError,
  defaultSocketPath,
  parseUrl,
  resolveConfig,
} from '@forkd/sdk';
import {
  FakeDaemon,
  fakeDaemonForFile,
  ID,
  json,
  ndjson,
  noContent,
  sandboxWire,
} from './fake-daemon.js';

const EXEC_ID = 'ex-0123456789ab';
const exitEvent = { type: 'exit', exit_code: 0, signal: null, timed_out: false, duration_ms: 5 };

const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64');

const daemon = fakeDaemonForFile('forkd-sdk-test-', (fake) =>
  fake.on('GET /v1/sandboxes/:id', (_r, res) => json(res, 200, sandboxWire())),
);
const { fake, dir } = daemon;
const config = { url: daemon.url, token: 'secret-token' };

// ---- config ---------------------------------------------------------------------------

test('addresses: unix:PATH, http(s)://host:port/prefix, the default socket, env vars', () => {
  assert.deepEqual(parseUrl('unix:/run/f.sock'), { kind: 'unix', socketPath: '/run/f.sock' });
  assert.deepEqual(parseUrl('https://h:8443/api/'), {
    kind: 'https',
    host: 'h',
    port: 8443,
    basePath: '/api',
  });
  assert.throws(() => parseUrl('ftp://x'), BadRequestError);
  assert.throws(() => parseUrl('http://host:99999'), {
    name: 'BadRequestError',
    message: /forkd URL "http:\/\/host:99999" is not usable: its host or port is not valid/,
  });
  assert.equal(defaultSocketPath({ FORKD_HOME: '/srv/f' }), '/srv/f/run/forkd.sock');
  const fromEnv = resolveConfig({}, { FORKD_URL: 'http://a:1', FORKD_TOKEN: 't' });
  assert.equal(fromEnv.token, 't');
  assert.equal(fromEnv.explicit, true);
  const local = resolveConfig({}, { FORKD_HOME: '/srv/f' });
  assert.equal(local.url, 'unix:/srv/f/run/forkd.sock');
  assert.equal(local.explicit, false);
  assert.equal(resolveConfig({ url: 'unix:/x' }, { FORKD_URL: 'unix:/y' }).url, 'unix:/x');
});

test('no daemon at the address: DaemonUnreachableError saying to run `forkd daemon`', async () => {
  const url = `unix:${join(dir, 'nobody.sock')}`;
  await assert.rejects(Sandbox.list({ url }), (e: unknown) => {
    assert.ok(e instanceof DaemonUnreachableError);
    assert.match(e.message, /forkd daemon/);
    assert.match(e.message, /nobody\.sock/);
    return true;
  });
  await assert.rejects(new Forkd({ url: 'http://127.0.0.1:1' }).health(), DaemonUnreachableError);
});

test('the token goes out as a bearer header', async () => {
  await Sandbox.connect(ID, config);
  assert.equal(fake.last('GET /v1/sandboxes/:id')?.headers.authorization, 'Bearer secret-token');
});

// ---- sandboxes ------------------------------------------------------------------------

test('create sends the contract body (timeoutMs rounded up to seconds) and maps the answer', async () => {
  fake.on('POST /v1/sandboxes', (_r, res) => json(res, 201, sandboxWire({ reason: 'x' })));
  const sbx = await Sandbox.create({
    ...config,
    image: 'busybox',
    memoryMib: 512,
    cpus: 2,
    env: { A: '1' },
    timeoutMs: 1500,
    labels: { job: '7' },
  });
  assert.deepEqual(JSON.parse(fake.last('POST /v1/sandboxes')?.body.toString() ?? ''), {
    image: 'busybox',
    memory_mib: 512,
    cpus: 2,
    env: { A: '1' },
    timeout_s: 2,
    labels: { job: '7' },
  });
  assert.equal(sbx.id, ID);
  assert.deepEqual(sbx.info, {
    id: ID,
    state: 'running',
    image: 'busybox',
    snapshot: null,
    parent: null,
    memoryMib: 256,
    cpus: 1,
    labels: { job: '7' },
    createdAt: '2025-01-01T00:00:00.000Z',
    expiresAt: null,
    pid: 4242,
    reason: 'x',
  });
});

test('list filters by state and label; setTimeout, refresh, logs, kill, dispose', async () => {
  fake.on('GET /v1/sandboxes', (_r, res) => json(res, 200, { sandboxes: [sandboxWire()] }));
  fake.on('PATCH /v1/sandboxes/:id', (_r, res) =>
    json(res, 200, sandboxWire({ expires_at: '2025-01-01T01:00:00.000Z' })),
  );
  fake.on('GET /v1/sandboxes/:id/logs', (_r, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' }).end('[    0.0] Linux\n');
  });
  let kills = 0;
  fake.on('DELETE /v1/sandboxes/:id', (_r, res) => {
    kills += 1;
    noContent(res);
  });
  const list = await Sandbox.list({ ...config, state: 'running', label: 'job=7' });
  assert.equal(list[0]?.memoryMib, 256);
  assert.deepEqual(fake.last('GET /v1/sandboxes')?.query, { state: 'running', label: 'job=7' });
  {
    await using sbx = await Sandbox.connect(ID, config);
    await sbx.setTimeout(3_600_000);
    assert.equal(sbx.info.expiresAt, '2025-01-01T01:00:00.000Z');
    assert.deepEqual(JSON.parse(fake.last('PATCH /v1/sandboxes/:id')?.body.toString() ?? ''), {
      timeout_s: 3600,
    });
    assert.equal((await sbx.refresh()).expiresAt, null);
    assert.equal(await sbx.logs(), '[    0.0] Linux\n');
    await sbx.kill();
    assert.equal(kills, 1);
  }
  assert.equal(kills, 2, 'await using killed it');
});

test('typed errors: unknown id, bad input, capacity with Retry-After, a proxy page', async () => {
  fake.on('GET /v1/sandboxes/:id', (_r, res) =>
    json(res, 404, { error: { code: 'sandbox_not_found', message: 'no sandbox sbx-…' } }),
  );
  await assert.rejects(Sandbox.connect(ID, config), SandboxNotFoundError);
  fake.on('POST /v1/sandboxes', (_r, res) =>
    json(res, 400, {
      error: {
        code: 'bad_request',
        message: 'body.cpus: too big',
        details: { field: 'body.cpus' },
      },
    }),
  );
  await assert.rejects(Sandbox.create({ ...config, cpus: 2 }), (e: unknown) => {
    assert.ok(e instanceof BadRequestError);
    assert.deepEqual(e.details, { field: 'body.cpus' });
    return true;
  });
  fake.on('GET /v1/sandboxes', (_r, res) =>
    json(res, 503, { error: { code: 'capacity', message: 'busy' } }, { 'retry-after': '3' }),
  );
  await assert.rejects(Sandbox.list(config), (e: unknown) => {
    assert.ok(e instanceof CapacityError);
    assert.equal(e.retryAfterMs, 3000);
    return true;
  });
  fake.on('GET /v1/images', (_r, res) => {
    res.writeHead(401, { 'content-type': 'text/html' }).end('<html>nope</html>');
  });
  await assert.rejects(new Forkd(config).images.list(), UnauthorizedError);
});

// ---- commands -------------------------------------------------------------------------

test('run without callbacks is one buffered exec; argv and options as the contract names them', async () => {
  fake.on('POST /v1/sandboxes/:id/exec', (_r, res) =>
    json(res, 200, {
      exit_code: 3,
      signal: null,
      timed_out: false,
      duration_ms: 12.5,
      stdout: b64('out ✓\n'),
      stderr: b64('err\n'),
    }),
  );
  const sbx = await Sandbox.connect(ID, config);
  const r = await sbx.commands.run('echo hi; exit 3', {
    envs: { X: '1' },
    cwd: '/tmp',
    user: 'root',
    timeoutMs: 999.5,
    stdin: 'in',
  });
  assert.deepEqual(r, {
    exitCode: 3,
    signal: null,
    timedOut: false,
    durationMs: 12.5,
    stdout: 'out ✓\n',
    stderr: 'err\n',
  });
  assert.deepEqual(JSON.parse(fake.last('POST /v1/sandboxes/:id/exec')?.body.toString() ?? ''), {
    argv: ['sh', '-c', 'echo hi; exit 3'],
    env: { X: '1' },
    cwd: '/tmp',
    user: 'root',
    timeout_ms: 1000,
    stdin: b64('in'),
  });
});

test('onStdout gets output as it streams, UTF-8 kept whole across chunk borders', async () => {
  const check = Buffer.from('✓'); // 3 bytes, cut between two events
  const events = [
    { type: 'started', exec_id: EXEC_ID, pid: 7 },
    { type: 'stdout', data: b64(Buffer.concat([Buffer.from('line 1 '), check.subarray(0, 1)])) },
    { type: 'stdout', data: b64(Buffer.concat([check.subarray(1), Buffer.from('\n')])) },
    { type: 'stderr', data: b64('warn\n') },
    { type: 'stdout', data: b64('line 2\n') },
    { ...exitEvent, exit_code: 0 },
  ];
  fake.on('POST /v1/sandboxes/:id/exec', (_r, res) => ndjson(res, events, 150));
  const sbx = await Sandbox.connect(ID, config);
  const arrivals: { at: number; s: string }[] = [];
  const errs: string[] = [];
  const start = Date.now();
  const r = await sbx.commands.run(['sh', '-c', 'x'], {
    onStdout: (s) => void arrivals.push({ at: Date.now() - start, s }),
    onStderr: (s) => void errs.push(s),
  });
  assert.equal(arrivals.map((a) => a.s).join(''), 'line 1 ✓\nline 2\n');
  assert.ok(!arrivals.some((a) => a.s.includes('\uFFFD')), 'no replacement characters');
  const spread = (arrivals.at(-1)?.at ?? 0) - (arrivals[0]?.at ?? 0);
  assert.ok(spread >= 300, `output arrived over ${spread} ms, not at once`);
  assert.deepEqual(errs, ['warn\n']);
  assert.equal(r.stdout, 'line 1 ✓\nline 2\n');
  assert.equal(r.stderr, 'warn\n');
  const body = JSON.parse(fake.last('POST /v1/sandboxes/:id/exec')?.body.toString() ?? '');
  assert.equal(body.stream, true);
});

test('start: stdin writes arrive in order, in ≤1 MiB requests, then EOF; kill sends the signal', async () => {
  fake.on('POST /v1/sandboxes/:id/exec', (_r, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write(JSON.stringify({ type: 'started', exec_id: EXEC_ID, pid: 9 }) + '\n');
    fake.on('POST /v1/sandboxes/:id/execs/:exec_id/kill', (r, kres) => {
      noContent(kres);
      const signal = JSON.parse(r.body.toString()).signal as string;
      res.end(JSON.stringify({ ...exitEvent, exit_code: null, signal }) + '\n');
    });
  });
  const stdin: Buffer[] = [];
  let eof = false;
  fake.on('POST /v1/sandboxes/:id/execs/:exec_id/stdin', async (r, res) => {
    await sleep(Math.random() * 20);
    assert.ok(r.body.length <= 1024 * 1024);
    stdin.push(r.body);
    if (r.query.eof) eof = true;
    noContent(res);
  });
  const sbx = await Sandbox.connect(ID, config);
  const cmd = await sbx.commands.start('cat', { keepStdinOpen: true, stdin: 'first ' });
  assert.equal(cmd.execId, EXEC_ID);
  assert.equal(cmd.pid, 9);
  const big = randomBytes(2.5 * 1024 * 1024);
  const writes = [cmd.stdin.write('second '), cmd.stdin.write(big), cmd.stdin.end()];
  await Promise.all(writes);
  assert.deepEqual(Buffer.concat(stdin), Buffer.concat([Buffer.from('first second '), big]));
  assert.ok(eof);
  await cmd.kill('SIGTERM');
  const r = await cmd.wait();
  assert.equal(r.signal, 'SIGTERM');
  assert.equal(r.exitCode, null);
  const body = JSON.parse(fake.last('POST /v1/sandboxes/:id/exec')?.body.toString() ?? '');
  assert.equal(body.keep_stdin_open, true);
  assert.equal(body.stdin, undefined, 'initial stdin goes through the stdin route');
});

test('an error event fails the command with its typed error', async () => {
  fake.on('POST /v1/sandboxes/:id/exec', (_r, res) =>
    ndjson(res, [
      { type: 'started', exec_id: EXEC_ID, pid: 7 },
      { type: 'stdout', data: b64('partial') },
      { type: 'error', error: { code: 'guest_error', message: 'the agent fell over' } },
    ]),
  );
  const sbx = await Sandbox.connect(ID, config);
  await assert.rejects(sbx.commands.run('x', { onStdout: () => undefined }), GuestErrorError);
});

test('a connection dropped mid-stream is a DaemonUnreachableError, not a hang', async () => {
  fake.on('POST /v1/sandboxes/:id/exec', (_r, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write(JSON.stringify({ type: 'started', exec_id: EXEC_ID, pid: 7 }) + '\n');
    setTimeout(() => res.socket?.destroy(), 50);
  });
  const sbx = await Sandbox.connect(ID, config);
  await assert.rejects(
    sbx.commands.run('x', { onStdout: () => undefined }),
    DaemonUnreachableError,
  );
});

test('aborting a streaming run rejects with the reason and kills the command', async () => {
  let killed: string | undefined;
  fake.on('POST /v1/sandboxes/:id/exec', (_r, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write(JSON.stringify({ type: 'started', exec_id: EXEC_ID, pid: 7 }) + '\n');
  });
  fake.on('POST /v1/sandboxes/:id/execs/:exec_id/kill', (r, res) => {
    killed = JSON.parse(r.body.toString()).signal as string;
    noContent(res);
  });
  const sbx = await Sandbox.connect(ID, config);
  const ac = new AbortController();
  const run = sbx.commands.run('sleep 100', { onStdout: () => undefined, signal: ac.signal });
  setTimeout(() => ac.abort(new Error('enough')), 100);
  await assert.rejects(run, /enough/);
  for (let i = 0; i < 50 && !killed; i++) await sleep(10);
  assert.equal(killed, 'SIGKILL');
});

// ---- files ----------------------------------------------------------------------------

test('files: a streamed 10 MB upload and download come back byte-identical', async () => {
  let stored: Buffer = Buffer.alloc(0);
  fake.on('PUT /v1/sandboxes/:id/files', (r, res) => {
    stored = r.body;
    json(res, 200, { size: r.body.length });
  });
  fake.on('GET /v1/sandboxes/:id/files', (_r, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    Readable.from(chunksOf(stored, 64 * 1024)).pipe(res);
  });
  const data = randomBytes(10 * 1024 * 1024);
  const sbx = await Sandbox.connect(ID, config);
  const written = await sbx.files.write('/tmp/blob', Readable.from(chunksOf(data, 100_000)), {
    mode: 0o600,
    parents: true,
  });
  assert.deepEqual(written, { path: '/tmp/blob', size: data.length });
  const put = fake.last('PUT /v1/sandboxes/:id/files');
  assert.deepEqual(put?.query, { path: '/tmp/blob', mode: 0o600, parents: true });
  assert.equal(put?.headers['transfer-encoding'], 'chunked', 'a Readable is streamed');
  const hash = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
  assert.equal(hash(await sbx.files.read('/tmp/blob')), hash(data));
  const streamed: Buffer[] = [];
  for await (const c of await sbx.files.readStream('/tmp/blob')) streamed.push(c as Buffer);
  assert.equal(hash(Buffer.concat(streamed)), hash(data));
  await sbx.files.write('/tmp/s', 'text ✓');
  assert.equal(stored.toString(), 'text ✓');
});

test('files: list, stat, remove, makeDir', async () => {
  const stat = { name: 'etc', kind: 'dir', size: 4096, mode: 0o755, mtime_ms: 1.5 };
  fake.on('GET /v1/sandboxes/:id/files/list', (_r, res) => json(res, 200, { entries: [stat] }));
  fake.on('GET /v1/sandboxes/:id/files/stat', (_r, res) => json(res, 200, stat));
  fake.on('DELETE /v1/sandboxes/:id/files', (_r, res) => noContent(res));
  fake.on('POST /v1/sandboxes/:id/files/mkdir', (_r, res) => noContent(res));
  const sbx = await Sandbox.connect(ID, config);
  const expected = { name: 'etc', kind: 'dir', size: 4096, mode: 0o755, mtimeMs: 1.5 };
  assert.deepEqual(await sbx.files.list('/'), [expected]);
  assert.deepEqual(await sbx.files.stat('/etc'), expected);
  await sbx.files.remove('/tmp/x', { recursive: true });
  assert.deepEqual(fake.last('DELETE /v1/sandboxes/:id/files')?.query, {
    path: '/tmp/x',
    recursive: true,
  });
  await sbx.files.makeDir('/a/b', { mode: 0o700 });
  assert.deepEqual(
    JSON.parse(fake.last('POST /v1/sandboxes/:id/files/mkdir')?.body.toString() ?? ''),
    {
      path: '/a/b',
      parents: true,
      mode: 0o700,
    },
  );
});

// ---- daemon-wide ----------------------------------------------------------------------

test('Forkd over TCP: health, version, images', async () => {
  const tcp = new FakeDaemon();
  await tcp.start({ port: 0 });
  try {
    tcp.on('GET /healthz', (_r, res) => json(res, 200, { status: 'ok' }));
    tcp.on('GET /version', (_r, res) =>
      json(res, 200, { version: '0.1.0', api: 'v1', qemu: '8.2', accel: 'tcg' }),
    );
    const image = {
      name: 'busybox',
      format: 'ext4',
      size_bytes: 10,
      disk_bytes: 5,
      created_at: 'now',
      source: { kind: 'busybox' },
    };
    tcp.on('GET /v1/images', (_r, res) => json(res, 200, { images: [image] }));
    tcp.on('POST /v1/images', (_r, res) => json(res, 201, image));
    tcp.on('DELETE /v1/images/:name', (_r, res) => noContent(res));
    const forkd = new Forkd({ url: tcp.url });
    await forkd.health();
    assert.deepEqual(await forkd.version(), {
      version: '0.1.0',
      api: 'v1',
      qemu: '8.2',
      accel: 'tcg',
    });
    const expected = {
      name: 'busybox',
      format: 'ext4',
      sizeBytes: 10,
      diskBytes: 5,
      createdAt: 'now',
      source: { kind: 'busybox' },
    };
    assert.deepEqual(await forkd.images.list(), [expected]);
    assert.deepEqual(
      await forkd.images.create({ name: 'busybox', fromDir: '/srv/x', sizeMib: 64, force: true }),
      expected,
    );
    await forkd.images.remove('busybox');
    assert.deepEqual(tcp.violations, []);
  } finally {
    await tcp.stop();
  }
});

function* chunksOf(data: Buffer, size: number): Generator<Buffer> {
  for (let at = 0; at < data.length; at += size) yield data.subarray(at, at + size);
}
