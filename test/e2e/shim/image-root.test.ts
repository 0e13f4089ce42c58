/**
 * A task that names no snapshot runs with its container's image as the VM's root: a private
 * containerd (test/helpers/containerd.ts) imports a small busybox image with a file only it
 * has, `ctr run --runtime io.containerd.forkd.v2` of it reads that file, and a second task
 * of the same image finds the forkd image made by the first (one image, made once: the
 * daemon's image list is the evidence, no timing). Nothing is left mounted or running.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { Forkd, Sandbox } from '@forkd/sdk';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { startContainerd, type Containerd } from '../../helpers/containerd.js';

const IMAGE = 'forkd.test/rooted:1';
const MARKER = 'only in the rooted image';

let home: TestHome;
let daemon: DaemonProcess;
let ctrd: Containerd;

before(async () => {
  home = await makeTestHome();
  daemon = await startDaemon(home);
  ctrd = await startContainerd(daemon.url);
  await ctrd.importImage(IMAGE, { '/etc/rooted': `${MARKER}\n` });
});

after(async () => {
  await ctrd?.stop();
  await daemon?.stop();
  await assertNoLeftovers(home).finally(() => home.cleanup());
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
