/**
 * containerd-shim-forkd-v2 end to end through containerd's own client: a private
 * containerd (test/helpers/containerd.ts) runs tasks under `io.containerd.forkd.v2` on a
 * real forkd daemon, each task a real microVM (TCG here). One task boots the busybox image;
 * two run on their container's image (a busybox image with a file only it has, built and
 * imported in `before`): the first imports it as a forkd image, the second finds that image
 * (the daemon's image list is the evidence, no timing). The others fork a warm snapshot
 * (made once, in `before`) to save the boots. Every case checks that its sandbox is gone,
 * and the file that nothing at all is left (no mount either).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Forkd, Sandbox } from '@forkd/sdk';
import { pidAlive } from '../../../src/util/pid.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { createWarmSnapshot, startContainerd, type Containerd } from '../../helpers/containerd.js';

const RUNTIME = ['--runtime', 'io.containerd.forkd.v2'];
const WARM = 'shim-warm';
/** The image tasks run on when they name no snapshot, and the file only it has. */
const IMAGE = 'forkd.test/rooted:1';
const MARKER = 'only in the rooted image';

let home: TestHome;
let daemon: DaemonProcess;
let ctrd: Containerd;

before(async () => {
  home = await makeTestHome();
  daemon = await startDaemon(home, ['--pod-snapshots', `${WARM},no-such-*`]);
  ctrd = await startContainerd(daemon.url);
  await createWarmSnapshot(daemon.url, WARM);
  await ctrd.importImage(IMAGE, { '/etc/rooted': `${MARKER}\n` });
});

after(async () => {
  await ctrd?.stop();
  await daemon?.stop();
  await assertNoLeftovers(home).finally(() => home.cleanup());
});

/** `ctr run` of task `id` with the forkd runtime: detached or not, extra flags before the rootfs. */
function run(id: string, argv: string[], flags: string[] = [], input?: string) {
  return ctrd.ctr(
    ['run', '--fifo-dir', ctrd.fifoDir, ...RUNTIME, ...flags, '--rootfs', ctrd.rootfs, id, ...argv],
    input,
  );
}

/** `ctr run -d` of task `id`, a fork of the warm snapshot sleeping until killed. */
const runDetached = (id: string) =>
  run(id, ['sleep', '100000'], ['-d', '--annotation', `forkd.dev/snapshot=${WARM}`]);

/** The running sandboxes of containerd task `id`. */
async function sandboxesOf(id: string) {
  return Sandbox.list({ url: daemon.url, label: `containerd.io/id=${id}`, state: 'running' });
}

async function until(what: string, check: () => Promise<boolean>, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms\n${ctrd.output()}`);
    await sleep(200);
  }
}

/** The status column of `ctr task ls` for `id` (undefined: no such task). */
/** `ctr task exec` of `argv` in task `id` as process `execId`, its output on the test's FIFOs. */
function taskExec(id: string, execId: string, argv: string[]) {
  return ctrd.ctr(['task', 'exec', '--fifo-dir', ctrd.fifoDir, '--exec-id', execId, id, ...argv]);
}

async function taskStatus(id: string): Promise<string | undefined> {
  const r = await ctrd.ctr(['task', 'ls']);
  const line = r.stdout
    .toString()
    .split('\n')
    .find((l) => l.startsWith(`${id} `));
  return line?.trim().split(/\s+/)[2];
}

test('ctr run prints the output of the command and exits with its code (busybox, cold boot)', async (t) => {
  const started = Date.now();
  const r = await run('cold', ['sh', '-c', 'echo hello; echo to-stderr >&2; exit 3'], ['--rm']);
  t.diagnostic(`ctr run → exit, booting busybox: ${Date.now() - started} ms`);
  assert.equal(r.stdout.toString(), 'hello\n', `${r.stderr}\n${ctrd.output()}`);
  assert.match(r.stderr, /to-stderr/);
  assert.equal(r.code, 3);
  assert.deepEqual(await sandboxesOf('cold'), []);
});

test('with the forkd.dev/snapshot annotation the task is a fork of the warm snapshot', async (t) => {
  const started = Date.now();
  const script =
    'cat /root/marker; ps | grep -v grep | grep -q "sleep 100000" && echo warm-process';
  const r = await run(
    'warm',
    ['sh', '-c', script],
    ['--rm', '--annotation', `forkd.dev/snapshot=${WARM}`],
  );
  t.diagnostic(`ctr run → exit, forked from a snapshot: ${Date.now() - started} ms`);
  assert.equal(r.stdout.toString(), 'warmed\nwarm-process\n', `${r.stderr}\n${ctrd.output()}`);
  assert.equal(r.code, 0);
  assert.deepEqual(await sandboxesOf('warm'), []);
});

test("ctr run's stdin reaches the process, and its end is end of file", async () => {
  const r = await run(
    'stdin',
    ['wc', '-l'],
    ['--rm', '--annotation', `forkd.dev/snapshot=${WARM}`],
    'a\nb\n',
  );
  assert.equal(r.stdout.toString().trim(), '2', `${r.stderr}\n${ctrd.output()}`);
  assert.equal(r.code, 0);
});

test('ctr run -t runs the process on a terminal, with its exit code', async () => {
  const r = await ctrd.ctrOnTerminal([
    'run',
    '-t',
    '--rm',
    '--fifo-dir',
    ctrd.fifoDir,
    ...RUNTIME,
    '--annotation',
    `forkd.dev/snapshot=${WARM}`,
    '--rootfs',
    ctrd.rootfs,
    'tty',
    'sh',
    '-c',
    'tty; echo "on a terminal"; exit 5',
  ]);
  const out = r.stdout.toString();
  assert.match(out, /\/dev\/pts\/\d+\s+on a terminal/, `${out}\n${r.stderr}\n${ctrd.output()}`);
  assert.equal(r.code, 5);
  assert.deepEqual(await sandboxesOf('tty'), []);
});

test('a detached task: exec runs a second process, kill stops it, delete removes the sandbox; events in order', async (t) => {
  const events = ctrd.ctrBackground(['events']);
  try {
    const r = await runDetached('det');
    assert.equal(r.code, 0, `${r.stderr}\n${ctrd.output()}`);
    assert.equal(await taskStatus('det'), 'RUNNING');
    const shimPid = (await readFile(`${ctrd.bundle('det')}/shim.pid`, 'utf8')).trim();
    const rss = /VmRSS:\s+(\d+)/.exec(await readFile(`/proc/${shimPid}/status`, 'utf8'))?.[1];
    t.diagnostic(`the serving shim's RSS: ${(Number(rss) / 1024).toFixed(1)} MiB`);
    assert.equal((await sandboxesOf('det')).length, 1);

    const started = Date.now();
    const e = await taskExec('det', 'e1', ['sh', '-c', 'echo from-exec; exit 4']);
    t.diagnostic(`ctr task exec round trip: ${Date.now() - started} ms`);
    assert.equal(e.stdout.toString(), 'from-exec\n', e.stderr);
    assert.equal(e.code, 4);

    assert.equal((await ctrd.ctr(['task', 'pause', 'det'])).code, 0);
    assert.equal(await taskStatus('det'), 'PAUSED');
    assert.equal((await sandboxesOf('det'))[0]?.tier, 'paused');
    assert.equal((await ctrd.ctr(['task', 'resume', 'det'])).code, 0);
    assert.equal(await taskStatus('det'), 'RUNNING');

    const k = await ctrd.ctr(['task', 'kill', 'det']);
    assert.equal(k.code, 0, k.stderr);
    await until(
      'the task stops after ctr task kill',
      async () => (await taskStatus('det')) === 'STOPPED',
    );
    const d = await ctrd.ctr(['task', 'delete', 'det']);
    assert.equal(d.code, 0, d.stderr);
    assert.equal((await ctrd.ctr(['container', 'rm', 'det'])).code, 0);
    assert.deepEqual(await sandboxesOf('det'), []);
    await until('the last event arrives', async () =>
      events.output().includes('/containers/delete'),
    );
  } finally {
    await events.stop();
  }
  const topics = events
    .output()
    .split('\n')
    .filter((l) => l.includes('/tasks/'))
    .map((l) => {
      const topic = /\/tasks\/[\w-]+/.exec(l)?.[0];
      const id = /"(?:exec_)?id":"(\w+)"/.exec(l.replace(/"container_id":"\w+",?/, ''))?.[1];
      return id ? `${topic} ${id}` : topic;
    });
  assert.deepEqual(topics, [
    '/tasks/create',
    '/tasks/start',
    '/tasks/exec-added e1',
    '/tasks/exec-started e1',
    '/tasks/exit e1',
    '/tasks/paused',
    '/tasks/resumed',
    '/tasks/exit det',
    '/tasks/delete det',
  ]);
});

/** The shim serving task `id`: its pid (from the bundle) and its RSS in MiB. */
async function shimOf(id: string): Promise<{ pid: number; rssMiB: number }> {
  const pid = Number(await readFile(`${ctrd.bundle(id)}/shim.pid`, 'utf8'));
  const rss = /VmRSS:\s+(\d+)/.exec(await readFile(`/proc/${pid}/status`, 'utf8'))?.[1];
  return { pid, rssMiB: Number(rss) / 1024 };
}

/** Kill task `id` with SIGKILL, wait until it stops, delete it and its container. */
async function removeTask(id: string): Promise<void> {
  assert.equal((await ctrd.ctr(['task', 'kill', '-s', 'SIGKILL', id])).code, 0);
  await until(`task ${id} stops`, async () => (await taskStatus(id)) === 'STOPPED');
  assert.equal((await ctrd.ctr(['task', 'delete', id])).code, 0);
  assert.equal((await ctrd.ctr(['container', 'rm', id])).code, 0);
}

test('one shim process serves every task of the namespace, and ends after the last one', async (t) => {
  assert.equal((await runDetached('one')).code, 0, ctrd.output());
  const first = await shimOf('one');
  assert.equal((await runDetached('two')).code, 0, ctrd.output());
  const second = await shimOf('two');
  t.diagnostic(
    `the shim's RSS: ${first.rssMiB.toFixed(1)} MiB with one task, ${second.rssMiB.toFixed(1)} MiB with two`,
  );
  assert.equal(second.pid, first.pid, 'the second task is served by the shim of the first');
  assert.equal(
    await readFile(`${ctrd.bundle('two')}/address`, 'utf8'),
    await readFile(`${ctrd.bundle('one')}/address`, 'utf8'),
  );
  await removeTask('one');
  // The first task's Shutdown does not end the shim: the second still answers.
  assert.equal(await taskStatus('two'), 'RUNNING');
  const e = await taskExec('two', 'x', ['echo', 'alive']);
  assert.equal(e.stdout.toString(), 'alive\n', e.stderr);
  await removeTask('two');
  await until('the shim ends after its last task', async () => !pidAlive(first.pid), 30_000);
  assert.deepEqual(await sandboxesOf('two'), []);
});

test("ctr task metrics reports the memory and CPU of the task's QEMU, from its cgroup", async () => {
  const r = await runDetached('met');
  assert.equal(r.code, 0, `${r.stderr}\n${ctrd.output()}`);
  const m = await ctrd.ctr(['task', 'metrics', '--format', 'json', 'met']);
  assert.equal(m.code, 0, m.stderr);
  const metrics = JSON.parse(m.stdout.toString()) as {
    memory?: { usage?: { usage?: number; limit?: number } };
    cpu?: { usage?: { total?: number } };
  };
  const [vm] = await sandboxesOf('met');
  const usage = (await Sandbox.connect(vm?.id ?? '', { url: daemon.url })).info.usage;
  const bytes = metrics.memory?.usage?.usage ?? 0;
  // Both read the same cgroup a moment apart: the same order of magnitude, not to the byte.
  assert.ok(bytes > 8 * 2 ** 20, `QEMU's memory, not a placeholder: ${m.stdout.toString()}`);
  assert.ok(
    Math.abs(bytes - (usage?.memoryBytes ?? 0)) < bytes / 4,
    `ctr: ${bytes}, forkd: ${usage?.memoryBytes}`,
  );
  assert.equal(metrics.memory?.usage?.limit, vm?.limits?.memoryBytes);
  assert.ok((metrics.cpu?.usage?.total ?? 0) > 0, 'CPU time in ns');
  await removeTask('met');
});

test('a containerd restarted mid-task finds the task again through its shim', async () => {
  const r = await runDetached('again');
  assert.equal(r.code, 0, `${r.stderr}\n${ctrd.output()}`);
  await ctrd.restart();
  assert.equal(await taskStatus('again'), 'RUNNING', ctrd.output());
  const e = await taskExec('again', 'e2', ['echo', 'still-here']);
  assert.equal(e.stdout.toString(), 'still-here\n', e.stderr);
  assert.equal((await ctrd.ctr(['task', 'kill', '-s', 'SIGKILL', 'again'])).code, 0);
  await until('the task stops', async () => (await taskStatus('again')) === 'STOPPED');
  assert.equal((await ctrd.ctr(['task', 'delete', 'again'])).code, 0);
  assert.equal((await ctrd.ctr(['container', 'rm', 'again'])).code, 0);
  assert.deepEqual(await sandboxesOf('again'), []);
});

test('a shim SIGKILLed mid-task leaves no sandbox once containerd has run delete', async () => {
  const r = await runDetached('lost');
  assert.equal(r.code, 0, `${r.stderr}\n${ctrd.output()}`);
  assert.equal((await sandboxesOf('lost')).length, 1);
  const pid = Number(await readFile(`${ctrd.bundle('lost')}/shim.pid`, 'utf8'));
  process.kill(pid, 'SIGKILL');
  await until(
    'the sandbox of the lost shim is killed',
    async () => (await sandboxesOf('lost')).length === 0,
  );
  await ctrd.ctr(['task', 'delete', 'lost']); // containerd may have removed the task already
  assert.equal((await ctrd.ctr(['container', 'rm', 'lost'])).code, 0);
});

test('a snapshot that does not exist fails the task with the reason', async () => {
  const r = await run(
    'nosnap',
    ['true'],
    ['--rm', '--annotation', 'forkd.dev/snapshot=no-such-snapshot'],
  );
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /no-such-snapshot/);
  assert.deepEqual(await sandboxesOf('nosnap'), []);
  await ctrd.ctr(['container', 'rm', 'nosnap']);
});

/** `ctr run --rm` of the test image as task `id` under the forkd runtime. */
const runImage = (id: string, argv: string[]) =>
  ctrd.ctr([
    'run',
    '--rm',
    '--fifo-dir',
    ctrd.fifoDir,
    '--runtime',
    'io.containerd.forkd.v2',
    IMAGE,
    id,
    ...argv,
  ]);

/** The daemon's images made from containers' roots. */
async function rootImages() {
  const images = await new Forkd({ url: daemon.url }).images.list();
  return images.filter((i) => i.name.startsWith('rootfs-'));
}

/** Mounts under the test containerd's directory (a rootfs the shim left mounted). */
async function mountsLeft(): Promise<string[]> {
  const mounts = await readFile('/proc/self/mountinfo', 'utf8');
  return mounts.split('\n').filter((l) => l.includes(`${ctrd.dir}/`));
}

test("a task without a snapshot runs on its container's image as the VM's root", async (t) => {
  const started = Date.now();
  const r = await runImage('rooted-1', ['sh', '-c', 'cat /etc/rooted; exit 7']);
  t.diagnostic(`ctr run → exit, importing the image: ${Date.now() - started} ms`);
  assert.equal(r.stdout.toString(), `${MARKER}\n`, `${r.stderr}\n${ctrd.output()}`);
  assert.equal(r.code, 7);
  const images = await rootImages();
  assert.equal(images.length, 1, JSON.stringify(images));
  assert.match(images[0]?.name ?? '', /^rootfs-[0-9a-f]{56}$/);
  // Made with its boot snapshot, so the next task of the image forks instead of booting.
  const boot = images[0]?.bootSnapshots?.filter((b) => b.current) ?? [];
  t.diagnostic(
    `boot snapshots: ${JSON.stringify(images[0]?.bootSnapshots)} ${images[0]?.warnings}`,
  );
  assert.equal(boot.length, 1, JSON.stringify(images[0]));
  assert.deepEqual(await mountsLeft(), []);
  assert.deepEqual(await Sandbox.list({ url: daemon.url, state: 'running' }), []);
});

test('a second task of the same image uses the forkd image the first made', async (t) => {
  const [before] = await rootImages();
  assert.ok(before, 'the first test made the image');
  const started = Date.now();
  const r = await runImage('rooted-2', ['cat', '/etc/rooted']);
  t.diagnostic(`ctr run → exit, image cached: ${Date.now() - started} ms`);
  assert.equal(r.stdout.toString(), `${MARKER}\n`, `${r.stderr}\n${ctrd.output()}`);
  assert.equal(r.code, 0);
  const [sandbox] = await Sandbox.list({ url: daemon.url, label: 'containerd.io/id=rooted-2' });
  t.diagnostic(`second sandbox: ${JSON.stringify(sandbox ?? 'gone')}`);
  // The same image, not made again: one of them, created when the first task made it.
  assert.deepEqual(
    (await rootImages()).map((i) => [i.name, i.createdAt]),
    [[before.name, before.createdAt]],
  );
  assert.deepEqual(await mountsLeft(), []);
});
