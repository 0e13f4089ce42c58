/**
 * `forkd daemon` as a real process with real microVMs: the run dir and socket modes, one
 * daemon per home, SIGTERM leaves sandboxes running for the next daemon, and the issue's
 * acceptance test: SIGKILL the daemon with 3 sandboxes, kill one QEMU meanwhile, restart:
 * the 2 live ones are listed running and answer exec, the killed one is dead and cleaned.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { forkd } from '../../helpers/cli.js';
import { selfSignedCert } from '../../helpers/certs.js';
import { assertNoLeftovers, makeTestHome, qemusUnder, type TestHome } from '../../helpers/home.js';
import { call, startDaemonProcess, stopDaemonProcess, type DaemonProcess } from './process.js';
import { freePort } from '../../helpers/ports.js';

let home: TestHome;
let daemon: DaemonProcess | undefined;

before(async () => {
  home = await makeTestHome();
});

after(async () => {
  try {
    if (daemon) await stopDaemonProcess(daemon, 'SIGKILL');
  } finally {
    await home.cleanup();
  }
});

interface Sbx {
  id: string;
  state: string;
  pid: number | null;
  reason?: string;
}

const out = (r: { body: unknown }) =>
  Buffer.from((r.body as { stdout: string }).stdout, 'base64').toString('utf8');

async function create(socket: string, labels: Record<string, string>): Promise<Sbx> {
  const r = await call(socket, 'POST', '/v1/sandboxes', { labels });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body as Sbx;
}

async function list(socket: string): Promise<Sbx[]> {
  return ((await call(socket, 'GET', '/v1/sandboxes')).body as { sandboxes: Sbx[] }).sandboxes;
}

test('the daemon makes a private run dir, a 0600 socket and a pid file; one per home', async () => {
  daemon = await startDaemonProcess(home);
  const run = join(home.dir, 'run');
  assert.equal((await stat(run)).mode & 0o777, 0o700);
  assert.equal((await stat(daemon.socket)).mode & 0o777, 0o600);
  assert.equal((await readFile(join(run, 'forkd.pid'), 'utf8')).trim(), String(daemon.child.pid));
  const second = await forkd(['daemon'], { env: home.env });
  assert.notEqual(second.code, 0);
  assert.match(second.stderr, /already serves this FORKD_HOME/);
  assert.equal(
    (await call(daemon.socket, 'GET', '/healthz')).status,
    200,
    'the first one still serves',
  );
});

test('SIGKILL with 3 sandboxes, one QEMU killed meanwhile: restart re-adopts 2, buries 1', async () => {
  assert.ok(daemon);
  const sandboxes = [];
  for (const n of ['a', 'b', 'c']) sandboxes.push(await create(daemon.socket, { n }));
  const [a, b, c] = sandboxes as [Sbx, Sbx, Sbx];

  assert.equal(await stopDaemonProcess(daemon, 'SIGKILL'), null);
  assert.equal((await qemusUnder(home.dir)).length, 3, 'QEMUs outlive the daemon');
  process.kill(c.pid as number, 'SIGKILL');

  daemon = await startDaemonProcess(home);
  const listed = new Map((await list(daemon.socket)).map((s) => [s.id, s]));
  for (const sb of [a, b]) {
    assert.equal(listed.get(sb.id)?.state, 'running', sb.id);
    const r = await call(daemon.socket, 'POST', `/v1/sandboxes/${sb.id}/exec`, {
      argv: ['sh', '-c', 'echo "alive $FORKD_SANDBOX_ID"'],
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(out(r), `alive ${sb.id}\n`);
  }
  assert.equal(listed.get(c.id)?.state, 'dead');
  assert.match(listed.get(c.id)?.reason ?? '', /daemon was down/);
  assert.equal(existsSync(join(home.paths.sandboxes, c.id)), false, 'the dead one is cleaned');
  assert.equal((await qemusUnder(home.dir)).length, 2);
});

test('SIGTERM drains and exits 0, sandboxes keep running, the next daemon adopts them', async () => {
  assert.ok(daemon);
  const before = (await list(daemon.socket)).filter((s) => s.state === 'running');
  // A request in flight when SIGTERM arrives is answered, not cut.
  const inFlight = call(daemon.socket, 'POST', `/v1/sandboxes/${before[0]?.id}/exec`, {
    argv: ['sh', '-c', 'sleep 1; echo finished'],
  });
  await sleep(300);
  assert.equal(await stopDaemonProcess(daemon, 'SIGTERM'), 0);
  const answered = await inFlight;
  assert.equal(answered.status, 200, JSON.stringify(answered.body));
  assert.equal(out(answered), 'finished\n');
  assert.equal(existsSync(daemon.socket), false, 'socket removed');
  assert.equal(existsSync(join(home.dir, 'run', 'forkd.pid')), false, 'pid file removed');
  assert.equal((await qemusUnder(home.dir)).length, before.length);

  daemon = await startDaemonProcess(home);
  const after = (await list(daemon.socket)).filter((s) => s.state === 'running');
  assert.deepEqual(after.map((s) => s.id).sort(), before.map((s) => s.id).sort());
  // No idle flags given: the daemon's default policy (docs/idle.md "The default policy").
  assert.deepEqual((after[0] as Sbx & { idle?: unknown }).idle, {
    pause_after_s: 60,
    hibernate_after_s: 3600,
    source: 'daemon',
  });
  for (const sb of after) {
    const del = await call(daemon.socket, 'DELETE', `/v1/sandboxes/${sb.id}`);
    assert.ok(del.status < 300, JSON.stringify(del.body));
    const got = (await call(daemon.socket, 'GET', `/v1/sandboxes/${sb.id}`)).body as Sbx;
    assert.deepEqual([got.state, got.reason], ['stopped', 'killed']);
  }
  assert.equal(await stopDaemonProcess(daemon, 'SIGTERM'), 0);
  daemon = undefined;
  await assertNoLeftovers(home);
});

test('TCP without a token file refuses to start; TLS with a token serves and audits', async () => {
  const refused = await forkd(['daemon', '--listen', '127.0.0.1:0'], { env: home.env });
  assert.notEqual(refused.code, 0);
  assert.match(refused.stderr, /without a token/);

  const token = '0123456789abcdef0123456789';
  const tokenFile = join(home.dir, 'tokens');
  await writeFile(tokenFile, `ci:${token}\n`, { mode: 0o600 });
  const { cert, key } = await selfSignedCert(home.dir, 'localhost', {
    extra: ['-addext', 'subjectAltName=IP:127.0.0.1'],
  });
  const port = await freePort();
  const auditFile = join(home.dir, 'audit.jsonl');
  daemon = await startDaemonProcess(home, [
    ...['--listen', `127.0.0.1:${port}`, '--tls-cert', cert, '--tls-key', key],
    ...['--token-file', tokenFile, '--audit-file', auditFile],
  ]);
  assert.equal((await call(daemon.socket, 'GET', '/healthz')).status, 200);
  assert.equal((await call(daemon.socket, 'GET', '/v1/sandboxes')).status, 401);
  const tls = { port, ca: await readFile(cert) };
  assert.equal((await httpsCall(tls, 'GET', '/v1/sandboxes')).status, 401);
  assert.equal((await httpsCall(tls, 'GET', '/v1/sandboxes', token)).status, 200);
  const del = await httpsCall(tls, 'DELETE', '/v1/sandboxes/sbx-000000000000', token);
  assert.equal(del.status, 404);
  assert.equal(await stopDaemonProcess(daemon, 'SIGTERM'), 0);
  daemon = undefined;
  const audit = (await readFile(auditFile, 'utf8'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.ok(
    audit.some((e) => e.principal === 'ci' && e.method === 'DELETE' && e.status === 404),
    JSON.stringify(audit),
  );
});

function httpsCall(
  tls: { port: number; ca: Buffer },
  method: string,
  path: string,
  token?: string,
): Promise<{ status: number }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      {
        ...{ host: '127.0.0.1', port: tls.port, ca: tls.ca, method, path },
        headers: token ? { authorization: `Bearer ${token}` } : {},
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0 }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}
