/**
 * The sandbox service with real microVMs (TCG here), no HTTP: create, exec (buffered and
 * streamed), a 10 MB file both ways, kill; timeouts and extend; filters; the concurrency
 * caps; a QEMU that dies on its own. Every test leaves no QEMU and no sandbox dir.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { isForkdError } from '../../../src/errors.js';
import {
  SandboxManager,
  type SandboxServiceOptions,
} from '../../../src/services/sandboxes/service.js';
import { Store } from '../../../src/store/db.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';
import { wireVmm } from '../../../src/services/vmm-driver.js';

wireVmm(); // sandboxes booted here without buildServices()

let home: TestHome;
let store: Store;
const managers: SandboxManager[] = [];
const caller = { principal: 'test' };

before(async () => {
  home = await makeTestHome();
  store = Store.open(home.paths.db);
});

after(async () => {
  try {
    for (const m of managers) await m.killAll();
    store.close();
    await assertNoLeftovers(home);
  } finally {
    await home.cleanup();
  }
});

async function manager(opts: Partial<SandboxServiceOptions> = {}): Promise<SandboxManager> {
  const m = new SandboxManager({ paths: home.paths, store, pollMs: 200, ...opts });
  managers.push(m);
  await m.start();
  return m;
}

const text = (b64: string) => Buffer.from(b64, 'base64').toString('utf8');
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

test('create → exec → 10 MB file round trip → kill, and nothing is left', async () => {
  const m = await manager();
  const sb = await m.create({ labels: { suite: 'roundtrip' }, env: { HELLO: 'world' } }, caller);
  assert.equal(sb.state, 'running');
  assert.match(sb.id, /^sbx-[0-9a-f]{12}$/);
  assert.equal(typeof sb.pid, 'number');
  assert.equal(sb.image, 'busybox');

  const r = await m.exec(sb.id, { argv: ['sh', '-c', 'echo "$HELLO"; echo err >&2; exit 3'] });
  assert.deepEqual([text(r.stdout), text(r.stderr), r.exit_code], ['world\n', 'err\n', 3]);
  const piped = await m.exec(sb.id, {
    argv: ['wc', '-c'],
    stdin: Buffer.from('12345').toString('base64'),
  });
  assert.equal(text(piped.stdout).trim(), '5');

  const data = randomBytes(10 * 1024 * 1024);
  const size = await m.writeFile(sb.id, '/tmp/big.bin', Readable.from([data]), {});
  assert.equal(size, data.length);
  const stat = await m.statFile(sb.id, '/tmp/big.bin');
  assert.deepEqual([stat.kind, stat.size], ['file', data.length]);
  const chunks: Buffer[] = [];
  for await (const c of await m.readFile(sb.id, '/tmp/big.bin')) chunks.push(c as Buffer);
  assert.equal(sha(Buffer.concat(chunks)), sha(data));
  assert.ok((await m.listFiles(sb.id, '/tmp')).some((e) => e.name === 'big.bin'));
  await m.makeDir(sb.id, '/tmp/a/b', { parents: true });
  await m.removeFile(sb.id, '/tmp/a', { recursive: true });
  await assert.rejects(m.readFile(sb.id, '/tmp/a'), (e) => isForkdError(e, 'guest_file_not_found'));
  assert.match(await m.consoleLog(sb.id), /\S/);

  await m.kill(sb.id);
  const killed = await m.get(sb.id);
  assert.deepEqual([killed.state, killed.reason, killed.pid], ['stopped', 'killed', null]);
  assert.equal(existsSync(`${home.paths.sandboxes}/${sb.id}`), false);
  await m.kill(sb.id); // idempotent: a retried DELETE succeeds
  await assert.rejects(m.exec(sb.id, { argv: ['true'] }), (e) =>
    isForkdError(e, 'sandbox_not_running'),
  );
  await assert.rejects(m.get('sbx-000000000000'), (e) => isForkdError(e, 'sandbox_not_found'));
  await assertNoLeftovers(home);
});

test('a streamed exec delivers output as it is produced, takes stdin and signals', async () => {
  const m = await manager();
  const sb = await m.create({}, caller);
  try {
    const ticks = await m.execStream(sb.id, {
      argv: ['sh', '-c', 'for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done'],
    });
    assert.match(ticks.execId, /^ex-[0-9a-f]{12}$/);
    assert.ok((await ticks.pid) > 0);
    const arrivals: number[] = [];
    let out = '';
    let exit: unknown;
    for await (const ev of ticks.events) {
      if (ev.type === 'stdout') {
        arrivals.push(Date.now());
        out += ev.data.toString();
      }
      if (ev.type === 'exit') exit = ev;
    }
    assert.equal(out, 'line1\nline2\nline3\nline4\nline5\n');
    assert.ok(arrivals.length >= 3, `output came in ${arrivals.length} piece(s)`);
    assert.ok((arrivals.at(-1) as number) - (arrivals[0] as number) >= 500);
    assert.deepEqual(exit && (exit as { exit_code: number }).exit_code, 0);

    const cat = await m.execStream(sb.id, { argv: ['cat'], keep_stdin_open: true });
    await m.writeStdin(sb.id, cat.execId, Buffer.from('hello '), false);
    await m.writeStdin(sb.id, cat.execId, Buffer.from('stdin'), true);
    let echoed = '';
    for await (const ev of cat.events) if (ev.type === 'stdout') echoed += ev.data.toString();
    assert.equal(echoed, 'hello stdin');

    const sleeper = await m.execStream(sb.id, { argv: ['sleep', '60'] });
    await m.killExec(sb.id, sleeper.execId, 'SIGTERM');
    let signal: string | null = null;
    for await (const ev of sleeper.events) if (ev.type === 'exit') signal = ev.signal;
    assert.equal(signal, 'SIGTERM');
    await assert.rejects(m.writeStdin(sb.id, sleeper.execId, Buffer.from('x'), true), (e) =>
      isForkdError(e, 'exec_not_found'),
    );
    await assert.rejects(m.execStream(sb.id, { argv: ['no-such-command'] }), (e) =>
      isForkdError(e, 'command_not_found'),
    );
    assert.equal(m.load().execs, 0, 'every exec slot was given back');
  } finally {
    await m.kill(sb.id);
  }
});

test('a sandbox with timeout_s is stopped when it expires; extend pushes that back', async () => {
  const m = await manager();
  const [short, extended] = await Promise.all([
    m.create({ timeout_s: 3, labels: { t: 'short' } }, caller),
    m.create({ timeout_s: 3, labels: { t: 'extended' } }, caller),
  ]);
  const before = Date.parse(extended.expires_at as string);
  const after = await m.extend(extended.id, 120);
  assert.ok(Date.parse(after.expires_at as string) > before + 100_000);
  await until(
    'the short sandbox to time out',
    async () => (await m.get(short.id)).state !== 'running',
  );
  const stopped = await m.get(short.id);
  assert.deepEqual([stopped.state, stopped.reason], ['stopped', 'timeout']);
  assert.ok(Date.now() >= Date.parse(short.expires_at as string));
  assert.equal((await m.get(extended.id)).state, 'running');

  // Filters: by label and by state.
  const byLabel = await m.list({ label: { key: 't', value: 'extended' } });
  assert.deepEqual(
    byLabel.map((s) => s.id),
    [extended.id],
  );
  const running = await m.list({ state: 'running' });
  assert.ok(running.some((s) => s.id === extended.id));
  assert.ok(!running.some((s) => s.id === short.id));
  assert.ok((await m.list({ state: 'stopped' })).some((s) => s.id === short.id));
  await assert.rejects(m.extend(short.id, 10), (e) => isForkdError(e, 'sandbox_not_running'));
  await assert.rejects(m.extend(extended.id, 0), (e) => isForkdError(e, 'bad_request'));
  await m.kill(extended.id);
  await assertNoLeftovers(home);
});

test('past the caps, create and exec fail at once with capacity', async () => {
  const m = await manager({ maxBooting: 1, maxExecs: 1 });
  const results = await Promise.allSettled([m.create({}, caller), m.create({}, caller)]);
  const refused = results.filter((r) => r.status === 'rejected');
  assert.equal(refused.length, 1);
  const err = (refused[0] as PromiseRejectedResult).reason as unknown;
  assert.ok(isForkdError(err, 'capacity'), String(err));
  assert.equal(typeof err.details?.retry_after_s, 'number');
  const sb = (
    results.find((r) => r.status === 'fulfilled') as PromiseFulfilledResult<{ id: string }>
  ).value;
  const holder = await m.execStream(sb.id, { argv: ['sleep', '30'] });
  await assert.rejects(m.exec(sb.id, { argv: ['true'] }), (e) => isForkdError(e, 'capacity'));
  await m.killExec(sb.id, holder.execId, 'SIGKILL');
  for await (const _ of holder.events) void _;
  assert.equal((await m.exec(sb.id, { argv: ['true'] })).exit_code, 0);
  await m.kill(sb.id);
  assert.equal((await m.list({ state: 'running' })).length, 0);
});

test('a sandbox whose QEMU dies on its own becomes dead, with a reason, and is cleaned', async () => {
  const m = await manager();
  const sb = await m.create({}, caller);
  process.kill(sb.pid as number, 'SIGKILL');
  await until('the sandbox to be dead', async () => (await m.get(sb.id)).state === 'dead');
  const dead = await m.get(sb.id);
  assert.match(dead.reason ?? '', /QEMU exited on its own \(killed by SIGKILL\)/);
  await until('its files to go', async () => !existsSync(`${home.paths.sandboxes}/${sb.id}`));
  assert.match(await m.consoleLog(sb.id), /\S/, 'the console log is kept after the death');
  await assertNoLeftovers(home);
});

test('killing a sandbox while it boots aborts the boot; the create call says so', async () => {
  const m = await manager();
  const creating = m.create({ labels: { t: 'aborted' } }, caller);
  creating.catch(() => undefined);
  await until('the sandbox to be starting', async () =>
    (await m.list({ state: 'starting' })).some((s) => s.labels.t === 'aborted'),
  );
  const [starting] = await m.list({ state: 'starting' });
  await m.kill(starting?.id as string);
  const killed = await m.get(starting?.id as string);
  assert.deepEqual([killed.state, killed.reason], ['stopped', 'killed']);
  await assert.rejects(creating, (e) => isForkdError(e, 'sandbox_not_running'));
  await assertNoLeftovers(home);
});
