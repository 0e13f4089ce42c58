/**
 * The unmodified `e2b` SDK (current 2.x) against a real `forkd daemon --e2b-listen`: the
 * envd parts beyond commands and files — E2B's pause (paused until connect(), auto-pause
 * without auto-resume), PTY sessions on forkd's terminals, E2B's words for a sandbox killed
 * under a running command, gzip both ways, and signed upload/download URLs fetched with
 * nothing but the URL, file metadata as xattrs, symlink targets, getMetrics, a shortened
 * timeout, the MCP gateway start failing as E2B's does. The template is busybox with a `user` account and a bash shim.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, Snapshot } from '@forkd/sdk';
import { loadE2b, type E2bModule, type E2bSandbox } from '../../helpers/e2b-sdk.js';
import {
  ADD_USER,
  BASH_SHIM,
  startE2bListener,
  type E2bListener,
} from '../../helpers/e2b-listener.js';

const TOKEN = 'e2b-envd-test-token-0123456789ab';
const TAG = 'e2b-envd';
const SETUP = [BASH_SHIM, ADD_USER];

let listener: E2bListener | undefined;
let forkd: { url: string; token: string };
let e2b: E2bModule;

before(async () => {
  e2b = await loadE2b('e2b');
  listener = await startE2bListener(TOKEN);
  forkd = listener.forkd;
  await Snapshot.create({ ...forkd, tag: TAG, warm: SETUP, user: 'user' });
});

after(() => listener?.stop());

/** A sandbox of the template for one test, killed after it. */
async function withSandbox(
  fn: (sbx: E2bSandbox) => Promise<void>,
  opts: Record<string, unknown> = {},
): Promise<void> {
  const sbx = await e2b.Sandbox.create(TAG, { timeoutMs: 120_000, ...opts });
  try {
    await fn(sbx);
  } finally {
    await sbx.kill().catch(() => false);
  }
}

test('pause(): the sandbox is paused (isRunning false, no request wakes it) until connect() resumes it as it was', async () => {
  await withSandbox(async (sbx) => {
    await sbx.files.write('kept.txt', 'from before the pause');
    const sleeper = await sbx.commands.run('sleep 600', { background: true });
    assert.equal(await sbx.pause?.(), true);
    assert.equal(await sbx.isRunning(), false);
    assert.equal(await sbx.isRunning(), false, 'asking did not wake it');
    assert.equal((await sbx.getInfo()).state, 'paused');
    await assert.rejects(sbx.files.read('kept.txt'), 'a file read does not wake it either');

    const resumed = await sbx.connect();
    assert.equal(resumed.sandboxId, sbx.sandboxId);
    assert.equal(await sbx.isRunning(), true);
    assert.equal(await sbx.files.read('kept.txt'), 'from before the pause');
    const pids = (await sbx.commands.list()).map((p) => p.pid);
    assert.ok(pids.includes(sleeper.pid), 'its background command still runs');
  });
});

test('auto-pause without auto-resume: paused at its timeout, requests do not wake it, connect() does', async () => {
  await withSandbox(
    async (sbx) => {
      let info = await sbx.getInfo();
      assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: false });
      assert.deepEqual(info.metadata, {}, 'the marker label is not metadata');
      const deadline = Date.now() + 30_000; // the idle sweep runs once a second
      while (info.state !== 'paused' && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 500));
        info = await sbx.getInfo();
      }
      assert.equal(info.state, 'paused');
      assert.equal(await sbx.isRunning(), false);
      assert.equal((await sbx.getInfo()).state, 'paused', 'the health check did not wake it');
      await sbx.connect();
      assert.equal((await sbx.commands.run('echo awake')).stdout, 'awake\n');
    },
    { timeoutMs: 2000, lifecycle: { onTimeout: 'pause', autoResume: false } },
  );
});

const decode = (chunks: Uint8Array[]): string => Buffer.concat(chunks).toString('utf8');

test('PTY sessions: create with envs, input, resize, disconnect and connect again, kill', async () => {
  await withSandbox(async (sbx) => {
    const out: Uint8Array[] = [];
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      envs: { ABC: 'from-envs' },
      onData: (d) => void out.push(d),
    });
    assert.ok(term.pid > 0);
    await sbx.pty.resize(term.pid, { cols: 123, rows: 45 });
    await sbx.pty.sendInput(term.pid, Buffer.from('echo "$ABC"; stty size\n'));
    const deadline = Date.now() + 30_000;
    while (!decode(out).includes('45 123') && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.match(decode(out), /from-envs/);
    assert.match(decode(out), /45 123/, 'the resize reached the terminal');

    await term.disconnect();
    const again: Uint8Array[] = [];
    const joined = await sbx.pty.connect(term.pid, { onData: (d) => void again.push(d) });
    assert.equal(joined.pid, term.pid);
    await sbx.pty.sendInput(term.pid, Buffer.from('echo second-"$ABC"; exit 0\n'));
    await joined.wait();
    assert.equal(joined.exitCode, 0);
    assert.match(decode(again), /second-from-envs/);

    const other = await sbx.pty.create({ cols: 80, rows: 24, onData: () => undefined });
    assert.equal(await sbx.pty.kill(other.pid), true);
    await assert.rejects(other.wait());
    assert.equal(await sbx.pty.kill(999_999), false);
  });
});

test('a sandbox killed under a running command: the wait fails with E2B’s TimeoutError and says so', async () => {
  const sbx = await e2b.Sandbox.create(TAG, { timeoutMs: 120_000 });
  const cmd = await sbx.commands.run('sleep 600', { background: true });
  await e2b.Sandbox.kill(sbx.sandboxId);
  const err = await cmd.wait().then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof e2b.TimeoutError, `a TimeoutError, not ${String(err)}`);
  assert.match(err.message, /sandbox was killed or reached its end of life/);
});

test('gzip both ways, and signed URLs: fetched with the URL alone, refused when expired or forged', async () => {
  await withSandbox(
    async (sbx) => {
      const text = 'squeezed '.repeat(1000);
      const info = await sbx.files.write('z.txt', text, { gzip: true });
      assert.equal(info.path, '/home/user/z.txt');
      assert.equal(await sbx.files.read('z.txt', { gzip: true }), text);
      assert.equal(await sbx.files.read('z.txt'), text);

      const down = await sbx.downloadUrl('z.txt', { useSignatureExpiration: 60_000 });
      const got = await fetch(down);
      assert.equal(got.status, 200);
      assert.equal(await got.text(), text);

      const up = await sbx.uploadUrl('up.txt', { user: 'root', useSignatureExpiration: 60_000 });
      const form = new FormData();
      form.append('file', 'uploaded by URL');
      const put = await fetch(up, { method: 'POST', body: form });
      assert.equal(put.status, 200);
      assert.deepEqual(await put.json(), [{ name: 'up.txt', type: 'file', path: '/root/up.txt' }]);
      assert.equal(
        (await sbx.commands.run('cat /root/up.txt', { user: 'root' })).stdout,
        'uploaded by URL',
      );

      const expired = await fetch(
        await sbx.downloadUrl('z.txt', { useSignatureExpiration: -10_000 }),
      );
      assert.equal(expired.status, 401);
      assert.deepEqual(await expired.json(), {
        code: 401,
        message: 'signature is already expired',
      });
      const forged = new URL(down);
      forged.searchParams.set('path', '/etc/shadow');
      assert.equal((await fetch(forged)).status, 401, 'the signature covers the path');
    },
    { secure: true },
  );
});

test('file metadata as user.e2b.* xattrs: kept with the file, shown by getInfo, list and rename, gone on an overwrite without it; symlink targets; removing a missing file', async () => {
  await withSandbox(async (sbx) => {
    const metadata = { author: 'mish', purpose: 'upload' };
    const written = await sbx.files.write('m.txt', 'with metadata', { metadata });
    assert.deepEqual(written.metadata, metadata);
    assert.deepEqual((await sbx.files.getInfo('m.txt')).metadata, metadata);
    const listed = (await sbx.files.list('.')).find((e) => e.name === 'm.txt');
    assert.deepEqual(listed?.metadata, metadata);
    assert.deepEqual((await sbx.files.rename('m.txt', 'n.txt')).metadata, metadata);

    const again = await sbx.files.write('n.txt', 'overwritten');
    assert.equal(again.metadata, undefined);
    assert.equal((await sbx.files.getInfo('n.txt')).metadata, undefined);

    const many = await sbx.files.writeFiles(
      [
        { path: 'a.txt', data: '1' },
        { path: 'b.txt', data: '2' },
      ],
      { metadata: { source: 'suite' } },
    );
    assert.deepEqual(
      many.map((f) => f.metadata),
      [{ source: 'suite' }, { source: 'suite' }],
    );
    assert.deepEqual((await sbx.files.getInfo('b.txt')).metadata, { source: 'suite' });

    await sbx.commands.run('ln -s n.txt link.txt');
    const link = await sbx.files.getInfo('link.txt');
    assert.equal(link.symlinkTarget, '/home/user/n.txt', 'absolute, as envd reports it');
    assert.equal((await sbx.files.getInfo('n.txt')).symlinkTarget, undefined);

    await sbx.files.remove('never-there.txt');
  });
});

test('getMetrics: a sample of the sandbox now, none for a range before it; a shortened timeout ends it', async () => {
  await withSandbox(async (sbx) => {
    const [m] = await sbx.getMetrics();
    assert.ok(m, 'one sample');
    const own = (await Sandbox.connect(sbx.sandboxId.replace(/^sbx/, 'sbx-'), forkd)).info;
    assert.equal(m.cpuCount, own.cpus);
    assert.equal(m.memTotal, own.memoryMib * 1024 * 1024);
    assert.ok(m.memUsed > 0, 'what its QEMU holds');
    assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100);
    assert.ok(m.timestamp instanceof Date);
    const hourAgo = Date.now() - 3_600_000;
    const none = await sbx.getMetrics({
      start: new Date(hourAgo),
      end: new Date(hourAgo + 60_000),
    });
    assert.deepEqual(none, []);

    await sbx.setTimeout(1000);
    const deadline = Date.now() + 60_000;
    while ((await sbx.isRunning()) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.equal(await sbx.isRunning(), false);
  });
});

test('MCP: create with `mcp` runs the SDK’s gateway start, which fails as on E2B when the template has no mcp-gateway, and the sandbox is gone', async () => {
  const metadata = { mcpCase: String(Date.now()) };
  await assert.rejects(
    e2b.Sandbox.create(TAG, { timeoutMs: 60_000, metadata, mcp: { none: {} } }),
    /Failed to start MCP gateway/,
  );
  const left = await e2b.Sandbox.list({ query: { state: ['running'], metadata } }).nextItems();
  assert.deepEqual(left, []);
});
