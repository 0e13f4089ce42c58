/**
 * The unmodified `e2b` SDK against a real `forkd daemon --e2b-listen` (real microVMs, TCG
 * here), pointed at it by E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL only. One snapshot
 * (busybox with a /bin/bash shim: the SDK runs every command as `/bin/bash -l -c`) serves
 * both SDK versions: the current 2.x (POST /v2/sandboxes) and 2.7 (POST /sandboxes).
 * The current SDK's auto-pause pauses a sandbox through forkd's idle policy.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox as ForkdSandbox, Snapshot } from '@forkd/sdk';
import { loadE2b, type E2bModule, type E2bSandbox } from '../../helpers/e2b-sdk.js';
import {
  ADD_USER,
  BASH_SHIM,
  startE2bListener,
  type E2bListener,
} from '../../helpers/e2b-listener.js';

const TOKEN = 'e2b-test-token-0123456789abcdef';
const TAG = 'e2b-base';
const USER_TAG = 'e2b-user';

let listener: E2bListener | undefined;
let forkd: { url: string; token: string };
let current: E2bModule;
let oldest: E2bModule;

before(async () => {
  [current, oldest] = await Promise.all([loadE2b('e2b'), loadE2b('e2b-2.7')]);
  listener = await startE2bListener(TOKEN);
  forkd = listener.forkd;
  await Snapshot.create({ ...forkd, tag: TAG, warm: [BASH_SHIM] });
  await Snapshot.create({
    ...forkd,
    tag: USER_TAG,
    warm: [BASH_SHIM, ADD_USER],
    user: 'user',
  });
});

after(() => listener?.stop());

test('the current e2b SDK: create with envs, commands, streaming, files, connect, list, timeout, kill', async () => {
  const { Sandbox, CommandExitError } = current;
  const sbx = await Sandbox.create(TAG, {
    envs: { GREETING: 'hello from e2b' },
    metadata: { suite: 'e2b' },
    timeoutMs: 120_000,
  });
  assert.match(sbx.sandboxId, /^[a-z0-9]+$/);

  const r = await sbx.commands.run('echo "$GREETING"; echo oops >&2');
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'hello from e2b\n');
  assert.equal(r.stderr, 'oops\n');

  const arrivals: number[] = [];
  const streamed = await sbx.commands.run('for i in 1 2 3; do echo line $i; sleep 0.4; done', {
    onStdout: () => void arrivals.push(Date.now()),
  });
  const finished = Date.now();
  assert.equal(streamed.stdout, 'line 1\nline 2\nline 3\n');
  assert.ok(arrivals.length >= 2, 'output arrived in pieces');
  assert.ok((arrivals[0] as number) < finished - 300, 'the first line came before the end');

  await assert.rejects(sbx.commands.run('echo partial; exit 3'), (e: unknown) => {
    assert.ok(e instanceof CommandExitError);
    assert.equal(e.exitCode, 3);
    assert.equal(e.stdout, 'partial\n');
    return true;
  });

  await sbx.files.write('/tmp/e2b/a.txt', 'written by e2b');
  assert.equal(await sbx.files.read('/tmp/e2b/a.txt'), 'written by e2b');
  assert.equal((await sbx.commands.run('cat /tmp/e2b/a.txt')).stdout, 'written by e2b');
  await sbx.commands.run('echo from-command > /tmp/e2b/b.txt');
  const names = (await sbx.files.list('/tmp/e2b')).map((e) => e.name).sort();
  assert.deepEqual(names, ['a.txt', 'b.txt']);
  assert.equal(await sbx.files.read('/tmp/e2b/b.txt'), 'from-command\n');

  const second = await Sandbox.connect(sbx.sandboxId);
  assert.equal((await second.commands.run('cat /tmp/e2b/b.txt')).stdout, 'from-command\n');
  const old = await oldest.Sandbox.connect(sbx.sandboxId);
  assert.equal(await old.files.read('/tmp/e2b/a.txt'), 'written by e2b');

  const listed = await Sandbox.list({ query: { metadata: { suite: 'e2b' } } }).nextItems();
  assert.deepEqual(
    listed.map((s) => s.sandboxId),
    [sbx.sandboxId],
  );

  // Pause and resume: forkd's pause (docs/idle.md); connect wakes the sandbox.
  assert.equal(await sbx.pause?.(), true);
  assert.equal((await sbx.getInfo()).state, 'paused');
  assert.equal(await sbx.pause?.(), false);
  const woken = await Sandbox.connect(sbx.sandboxId);
  assert.equal((await sbx.getInfo()).state, 'running');
  assert.equal((await woken.commands.run('cat /tmp/e2b/a.txt')).stdout, 'written by e2b');

  await sbx.setTimeout(60_000);
  const endAt = (await sbx.getInfo()).endAt.getTime();
  assert.ok(Math.abs(endAt - (Date.now() + 60_000)) < 15_000, `endAt ${endAt} is about 60 s out`);

  // The same sandbox through forkd's own SDK: its labels, the file e2b wrote.
  const forkdId = `sbx-${sbx.sandboxId.slice(3)}`;
  const mine = await ForkdSandbox.connect(forkdId, forkd);
  assert.equal(mine.info.labels.suite, 'e2b');
  assert.deepEqual((await sbx.getInfo()).metadata, { suite: 'e2b' });
  assert.equal(Buffer.from(await mine.files.read('/tmp/e2b/a.txt')).toString(), 'written by e2b');

  assert.equal(await sbx.kill(), true);
  assert.equal(await Sandbox.kill(sbx.sandboxId), false);
  assert.equal(await sbx.isRunning(), false);
});

test('e2b 2.7 (POST /sandboxes): create from the same snapshot, commands and files', async () => {
  const { Sandbox, CommandExitError } = oldest;
  const sbx = await Sandbox.create(TAG, { envs: { WHO: 'old-sdk' }, timeoutMs: 120_000 });
  assert.equal((await sbx.commands.run('echo "$WHO" && test -x /bin/bash')).stdout, 'old-sdk\n');
  await assert.rejects(
    sbx.commands.run('exit 7'),
    (e: unknown) => e instanceof CommandExitError && e.exitCode === 7,
  );
  await sbx.files.write('/tmp/old.txt', 'multipart upload');
  assert.equal((await sbx.commands.run('cat /tmp/old.txt')).stdout, 'multipart upload');
  // 2.7's instance kill() answers nothing; its static one says whether there was a sandbox.
  assert.equal(await Sandbox.kill(sbx.sandboxId), true);
  assert.equal(await Sandbox.kill(sbx.sandboxId), false);
});

test("auto-pause (lifecycle onTimeout 'pause'): paused its timeout after its last request; a command wakes it", async () => {
  const { Sandbox } = current;
  const sbx = await Sandbox.create(TAG, {
    timeoutMs: 1000,
    lifecycle: { onTimeout: 'pause', autoResume: true },
  });
  try {
    await sbx.commands.run('echo kept > /tmp/auto');
    let info = await sbx.getInfo();
    assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true });
    const deadline = Date.now() + 15_000; // the idle sweep runs once a second
    while (info.state !== 'paused' && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      info = await sbx.getInfo();
    }
    assert.equal(info.state, 'paused', 'paused about 1 s after its last command');
    assert.equal((await sbx.commands.run('cat /tmp/auto')).stdout, 'kept\n');
    assert.equal((await sbx.getInfo()).state, 'running', 'the command woke it');
  } finally {
    await sbx.kill();
  }
});

test("a template's default user: commands run as it, relative paths resolve in its home, what a call creates belongs to the call's user", async () => {
  const { Sandbox } = current;
  const info = await Snapshot.get(USER_TAG, forkd);
  assert.equal(info.info.user, 'user', 'the snapshot records its default user');
  const sbx = await Sandbox.create(USER_TAG, { timeoutMs: 120_000 });
  try {
    assert.equal((await sbx.commands.run('id -un; pwd')).stdout, 'user\n/home/user\n');
    assert.equal((await sbx.commands.run('id -un', { user: 'root' })).stdout, 'root\n');

    const written = await sbx.files.write('notes/a.txt', 'relative');
    assert.equal(written.path, '/home/user/notes/a.txt');
    const owners = await sbx.commands.run(
      'stat -c "%U %G %n" /home/user/notes /home/user/notes/a.txt',
    );
    assert.equal(owners.stdout, 'user user /home/user/notes\nuser user /home/user/notes/a.txt\n');
    assert.equal(await sbx.files.read('notes/a.txt'), 'relative');
    const entry = await sbx.files.getInfo('notes/a.txt');
    assert.equal(entry.path, '/home/user/notes/a.txt');
    assert.equal(entry.owner, 'user');
    assert.equal(entry.group, 'user');

    await sbx.files.write('/tmp/by-root.txt', 'x', { user: 'root' });
    assert.equal((await sbx.files.getInfo('/tmp/by-root.txt', { user: 'root' })).owner, 'root');
    await sbx.files.makeDir('d1/d2');
    const dirs = await sbx.commands.run('stat -c "%U %n" /home/user/d1 /home/user/d1/d2');
    assert.equal(dirs.stdout, 'user /home/user/d1\nuser /home/user/d1/d2\n');
    const listed = await sbx.files.list('.');
    assert.deepEqual(
      listed.filter((e) => e.name === 'd1').map((e) => [e.path, e.owner]),
      [['/home/user/d1', 'user']],
    );
    await sbx.files.rename('notes/a.txt', 'notes/b.txt');
    assert.equal(await sbx.files.read('/home/user/notes/b.txt'), 'relative');

    // forkd's own SDK on the same sandbox: the same defaults.
    const mine = await ForkdSandbox.connect(`sbx-${sbx.sandboxId.slice(3)}`, forkd);
    const r = await mine.commands.run('id -un; pwd');
    assert.equal(r.stdout, 'user\n/home/user\n');
    await mine.files.write('/home/user/from-forkd.txt', 'y');
    const own = await sbx.commands.run('stat -c %U /home/user/from-forkd.txt');
    assert.equal(own.stdout, 'user\n');
  } finally {
    await sbx.kill();
  }
});

test('Sandbox.list as E2B serves it: pages (limit, nextToken), newest first or order asc, template and start-time filters; connect() never shortens a timeout', async () => {
  const { Sandbox } = current;
  const run = `list-${Date.now()}`;
  const a = await Sandbox.create(TAG, { metadata: { run }, timeoutMs: 120_000 });
  const b = await Sandbox.create(TAG, { metadata: { run }, timeoutMs: 120_000 });
  try {
    const pages = Sandbox.list({ limit: 1, query: { metadata: { run } } });
    const first = await pages.nextItems();
    assert.deepEqual(
      first.map((s) => s.sandboxId),
      [b.sandboxId],
      'newest first',
    );
    assert.equal(pages.hasNext, true);
    const second = await pages.nextItems();
    assert.deepEqual(
      second.map((s) => s.sandboxId),
      [a.sandboxId],
    );
    assert.equal(pages.hasNext, false);

    const asc = await Sandbox.list({ query: { metadata: { run } }, order: 'asc' }).nextItems();
    assert.deepEqual(
      asc.map((s) => s.sandboxId),
      [a.sandboxId, b.sandboxId],
    );
    const byTemplate = Sandbox.list({ query: { metadata: { run }, template: TAG } });
    assert.equal((await byTemplate.nextItems()).length, 2);
    const other = Sandbox.list({ query: { metadata: { run }, template: 'no-such-template' } });
    assert.equal((await other.nextItems()).length, 0);
    const startedAt = (await b.getInfo()).startedAt;
    const since = Sandbox.list({ query: { metadata: { run }, startedAfter: startedAt } });
    assert.deepEqual(
      (await since.nextItems()).map((s) => s.sandboxId),
      [b.sandboxId],
    );

    const endAt = (await a.getInfo()).endAt.getTime();
    await Sandbox.connect(a.sandboxId, { timeoutMs: 5_000 });
    assert.equal((await a.getInfo()).endAt.getTime(), endAt, 'connect kept the longer timeout');
  } finally {
    await Promise.allSettled([a.kill(), b.kill()]);
  }
});

test('sandbox.fork() and Sandbox.fork(id, {count}): children see the parent’s files and processes from the fork instant, and go their own way', async () => {
  const { Sandbox } = current;
  const sbx = await Sandbox.create(TAG, { timeoutMs: 120_000 });
  const children: E2bSandbox[] = [];
  try {
    await sbx.files.write('/tmp/state.txt', 'before fork');
    await sbx.commands.run('sleep 600 >/dev/null 2>&1 & echo $! > /tmp/sleeper');
    const forks = await Sandbox.fork(sbx.sandboxId, { count: 2, timeoutMs: 60_000 });
    for (const f of forks) if (!(f instanceof Error)) children.push(f);
    assert.equal(
      children.length,
      2,
      `two children: ${forks.filter((f) => f instanceof Error).join('; ')}`,
    );
    assert.equal(new Set([sbx, ...children].map((s) => s.sandboxId)).size, 3);
    for (const child of children) {
      assert.equal(await child.files.read('/tmp/state.txt'), 'before fork');
      const alive = await child.commands.run('kill -0 "$(cat /tmp/sleeper)" && echo alive');
      assert.equal(alive.stdout, 'alive\n', 'the process started before the fork runs in it');
    }
    await children[0]!.files.write('/tmp/state.txt', 'changed in a child');
    assert.equal(await sbx.files.read('/tmp/state.txt'), 'before fork');
    assert.equal(await children[1]!.files.read('/tmp/state.txt'), 'before fork');
    const info = await children[0]!.getInfo();
    assert.ok(Math.abs(info.endAt.getTime() - (Date.now() + 60_000)) < 20_000, 'its own timeout');
    assert.equal(await sbx.isRunning(), true, 'the parent keeps running');
    const [one] = await (sbx.fork?.() ?? Promise.reject(new Error('no fork()')));
    assert.ok(one && !(one instanceof Error));
    children.push(one);
    assert.equal(await one.files.read('/tmp/state.txt'), 'before fork');
  } finally {
    await Promise.allSettled([sbx, ...children].map((s) => s.kill()));
  }
});
