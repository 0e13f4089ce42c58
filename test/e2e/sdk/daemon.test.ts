/**
 * The SDK end to end: a real `forkd daemon` child process on this file's own FORKD_HOME,
 * real microVMs (TCG here). Output streams as it is produced, 10 MB round-trips
 * byte-identical, 50 concurrent commands across 5 sandboxes all succeed, errors are typed,
 * and nothing is left behind, even when a test fails.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  BadRequestError,
  CapacityError,
  CommandNotFoundError,
  GuestFileNotFoundError,
  Sandbox,
  SandboxNotFoundError,
  type SandboxCreateOptions,
} from '@forkd/sdk';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';

let home: TestHome;
let daemon: DaemonProcess | undefined;
let url: string;

before(async () => {
  home = await makeTestHome();
  daemon = await startDaemon(home);
  url = daemon.url;
});
after(async () => {
  try {
    const left = await Sandbox.list({ url }).catch(() => []);
    await Promise.allSettled(left.map((s) => Sandbox.kill(s.id, { url })));
  } finally {
    await daemon?.stop();
    await home.cleanup();
  }
});

/** The daemon caps concurrent boots (503 capacity): wait as it asks, then try again. */
async function create(opts: SandboxCreateOptions = {}): Promise<Sandbox> {
  for (;;) {
    try {
      return await Sandbox.create({ url, image: 'busybox', ...opts });
    } catch (e) {
      if (!(e instanceof CapacityError)) throw e;
      await sleep(e.retryAfterMs ?? 1000);
    }
  }
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

function* chunksOf(data: Buffer, size: number): Generator<Buffer> {
  for (let at = 0; at < data.length; at += size) yield data.subarray(at, at + size);
}

test('a sandbox: output streams as produced, 10 MB both ways byte-identical, then killed', async () => {
  const sbx = await create({ labels: { suite: 'sdk' } });
  assert.equal(sbx.info.state, 'running');
  assert.deepEqual(sbx.info.labels, { suite: 'sdk' });

  const arrivals: { at: number; text: string }[] = [];
  const start = Date.now();
  const r = await sbx.commands.run('for i in 1 2 3 4 5 6; do echo line $i; sleep 0.2; done', {
    onStdout: (text) => void arrivals.push({ at: Date.now() - start, text }),
  });
  assert.equal(r.exitCode, 0, r.stderr);
  const expected = [1, 2, 3, 4, 5, 6].map((i) => `line ${i}\n`).join('');
  assert.equal(arrivals.map((a) => a.text).join(''), expected);
  assert.equal(r.stdout, expected);
  assert.ok(arrivals.length >= 3, `output came in ${arrivals.length} piece(s), not as it was made`);
  const spread = (arrivals.at(-1)?.at ?? 0) - (arrivals[0]?.at ?? 0);
  assert.ok(spread >= 600, `the pieces arrived within ${spread} ms: not streamed`);

  const data = randomBytes(10 * 1024 * 1024);
  const written = await sbx.files.write('/tmp/blob', Readable.from(chunksOf(data, 256 * 1024)));
  assert.equal(written.size, data.length);
  assert.equal((await sbx.files.stat('/tmp/blob')).size, data.length);
  assert.equal(sha256(await sbx.files.read('/tmp/blob')), sha256(data));
  const streamed: Buffer[] = [];
  for await (const chunk of await sbx.files.readStream('/tmp/blob')) streamed.push(chunk as Buffer);
  assert.equal(sha256(Buffer.concat(streamed)), sha256(data));
  const inGuest = await sbx.commands.run(['sha256sum', '/tmp/blob']);
  assert.equal(inGuest.stdout.split(' ')[0], sha256(data), 'the guest holds the same bytes');

  await sbx.kill();
  assert.equal((await sbx.refresh()).state, 'stopped');
});

test('files: makeDir, list, remove; commands: stdin, cwd, env, timeout, start/kill', async () => {
  await using sbx = await create({ env: { FROM_CREATE: 'yes' } });
  await sbx.files.makeDir('/work/sub');
  await sbx.files.write('/work/sub/a.txt', 'hello ✓');
  assert.deepEqual(
    (await sbx.files.list('/work/sub')).map((e) => [e.name, e.kind, e.size]),
    [['a.txt', 'file', Buffer.byteLength('hello ✓')]],
  );
  const r = await sbx.commands.run('cat; echo " $PWD $FROM_CREATE $X"', {
    stdin: 'in',
    cwd: '/work',
    envs: { X: 'x' },
  });
  assert.equal(r.stdout, 'in /work yes x\n');
  await sbx.files.remove('/work', { recursive: true });
  await assert.rejects(sbx.files.stat('/work'), GuestFileNotFoundError);

  const slow = await sbx.commands.run('sleep 30', { timeoutMs: 500 });
  assert.equal(slow.timedOut, true);

  const cat = await sbx.commands.start('cat', { keepStdinOpen: true });
  await cat.stdin.write('one ');
  await cat.stdin.write(new TextEncoder().encode('two'));
  await cat.stdin.end();
  assert.equal((await cat.wait()).stdout, 'one two');

  const sleeper = await sbx.commands.start('sleep 60');
  await sleeper.kill('SIGTERM');
  const ended = await sleeper.wait();
  assert.equal(ended.signal, 'SIGTERM');
});

test('50 concurrent commands across 5 sandboxes all succeed with their own output', async () => {
  const sandboxes = await Promise.all([0, 1, 2, 3, 4].map(() => create()));
  try {
    const runs = Array.from({ length: 50 }, (_, n) => {
      const sbx = sandboxes[n % 5] as Sandbox;
      const streaming = n % 2 === 0; // half buffered, half streamed
      let streamed = '';
      return sbx.commands
        .run(`echo out-${n} $FORKD_SANDBOX_ID; echo err-${n} >&2; exit ${n % 4}`, {
          onStdout: streaming ? (s) => void (streamed += s) : undefined,
        })
        .then((r) => ({ n, r, sbx, streamed, streaming }));
    });
    for (const { n, r, sbx, streamed, streaming } of await Promise.all(runs)) {
      assert.equal(r.stdout, `out-${n} ${sbx.id}\n`);
      assert.equal(r.stderr, `err-${n}\n`);
      assert.equal(r.exitCode, n % 4);
      if (streaming) assert.equal(streamed, r.stdout);
    }
  } finally {
    await Promise.all(sandboxes.map((s) => s.kill()));
  }
});

test('typed errors: unknown id, bad input, missing command or file', async () => {
  await assert.rejects(Sandbox.connect('sbx-000000000000', { url }), SandboxNotFoundError);
  await assert.rejects(Sandbox.kill('sbx-000000000000', { url }), SandboxNotFoundError);
  await assert.rejects(Sandbox.connect('../etc', { url }), BadRequestError);
  await assert.rejects(create({ memoryMib: 1 }), BadRequestError);
  await assert.rejects(create({ labels: { 'bad key': 'x' } }), BadRequestError);
  await using sbx = await create();
  await assert.rejects(sbx.commands.run('true', { cwd: 'relative' }), BadRequestError);
  await assert.rejects(sbx.commands.run(['no-such-command']), CommandNotFoundError);
  await assert.rejects(
    sbx.commands.run(['no-such-command'], { onStdout: () => undefined }),
    CommandNotFoundError,
  );
  await assert.rejects(sbx.files.read('/no/such/file'), GuestFileNotFoundError);
});

test('nothing is left behind', async () => {
  assert.deepEqual(
    (await Sandbox.list({ url })).filter((s) => s.state === 'running'),
    [],
    'a sandbox is still running',
  );
  await assertNoLeftovers(home);
});
