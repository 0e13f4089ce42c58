/**
 * Boot snapshots (docs/snapshots.md "Boot snapshots"), as a user sees them: `forkd run`
 * without a daemon and `forkd create` through one start from an image by forking its
 * hidden boot snapshot, not by booting a kernel; two starts never share random state
 * (different boot_id); `--cold` boots; an image rebuilt under the same name never gets its
 * old boot snapshot; concurrent first starts share one capture.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { copyFile, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HOST_BUSYBOX } from '../../../src/services/images/index.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';
import { bootDaemon } from '../../helpers/boot-daemon.js';
import { forkd } from '../../helpers/cli.js';

const BOOT_ID = ['cat', '/proc/sys/kernel/random/boot_id'];
/** What a boot writes to the console: the agent mounting its root, as PID 1 after the kernel. */
const KERNEL_BANNER = /forkd-agent: root is \/dev\/vda/;

let home: TestHome;
let tree: string;
before(async () => {
  home = await makeTestHome();
  tree = await mkdtemp(join(tmpdir(), 'forkd-boot-tree-'));
});
after(async () => {
  await rm(tree, { recursive: true, force: true });
  await home.cleanup();
});

const cli = (args: string[]) => forkd(args, { env: home.env });

/** An image of a static busybox and a marker file saying which build it is. */
async function buildMarked(name: string, marker: string, force = false): Promise<void> {
  await rm(tree, { recursive: true, force: true });
  await mkdir(join(tree, 'bin'), { recursive: true });
  await copyFile(HOST_BUSYBOX, join(tree, 'bin', 'busybox'));
  for (const applet of ['sh', 'cat']) await symlink('busybox', join(tree, 'bin', applet));
  await writeFile(join(tree, 'marker'), `${marker}\n`);
  const args = ['image', 'build', '--from-dir', tree, '--name', name, '--size', '64M'];
  const r = await cli(force ? [...args, '--force'] : args);
  assert.equal(r.code, 0, r.stderr);
}

test('forkd run (no daemon): the second run restores the boot snapshot, with its own boot_id; --cold boots', async () => {
  const first = await cli(['run', '-v', '--', ...BOOT_ID]);
  assert.equal(first.code, 0, first.stderr);
  assert.match(
    first.stderr,
    /captured it in \d+ ms, then restored boot snapshot boot-[0-9a-f]{16}/,
  );
  const second = await cli(['run', '-v', '--', ...BOOT_ID]);
  assert.equal(second.code, 0, second.stderr);
  // No capture, no boot: a restore of the snapshot the first run made.
  assert.match(
    second.stderr,
    /^forkd: restored boot snapshot boot-[0-9a-f]{16} of image busybox\n$/,
  );
  const ids = [first, second].map((r) => r.stdout.toString().trim());
  assert.match(ids[0] ?? '', /^[0-9a-f-]{36}$/);
  assert.notEqual(ids[0], ids[1], 'two runs of one boot snapshot share no random state');

  const cold = await cli(['run', '-v', '--cold', '--', ...BOOT_ID]);
  assert.equal(cold.code, 0, cold.stderr);
  assert.match(cold.stderr, /booted the kernel of image busybox \(--cold\)/);
  assert.doesNotMatch(cold.stderr, /restored/);
  await assertNoLeftovers(home);
});

test('forkd run (no daemon): an image rebuilt under the same name never gets its old boot snapshot', async () => {
  await buildMarked('marked', 'one');
  const a = await cli(['run', '-v', '--image', 'marked', '--', 'cat', '/marker']);
  assert.equal(a.stdout.toString(), 'one\n', a.stderr);
  const tagA = /boot snapshot (boot-[0-9a-f]{16})/.exec(a.stderr)?.[1];
  assert.ok(tagA, a.stderr);

  await buildMarked('marked', 'two', true);
  const b = await cli(['run', '-v', '--image', 'marked', '--', 'cat', '/marker']);
  assert.equal(b.stdout.toString(), 'two\n', b.stderr);
  // The rebuild captured the new image's boot snapshot (docs/images.md): the run restores it.
  assert.match(b.stderr, /^forkd: restored boot snapshot boot-[0-9a-f]{16} of image marked\n$/);
  const tagB = /boot snapshot (boot-[0-9a-f]{16})/.exec(b.stderr)?.[1];
  assert.ok(tagB && tagB !== tagA, `${tagA} then ${tagB}`);

  // The rebuild took the old boot snapshot with it; `forkd images` shows the new one.
  const images = JSON.parse((await cli(['images', '--json'])).stdout.toString()) as {
    name: string;
    boot_snapshots?: { tag: string; current: boolean }[];
  }[];
  const marked = images.find((i) => i.name === 'marked');
  assert.deepEqual(
    marked?.boot_snapshots?.map((s) => [s.tag, s.current]),
    [[tagB, true]],
  );
  assert.equal(
    (await cli(['image', 'rm', 'marked'])).code,
    0,
    'a boot snapshot does not keep its image',
  );
  await assertNoLeftovers(home);
});

test('through the daemon: create forks the boot snapshot (no kernel boot, own boot_id), concurrent first creates share one capture, --cold boots', async (t) => {
  const served = await bootDaemon(t, home);
  const { daemon, env } = served;
  const create = (...args: string[]) => served.create('--memory', '192M', ...args);
  const exec = async (id: string) => {
    const r = await forkd(['exec', id, '--', ...BOOT_ID], { env });
    assert.equal(r.code, 0, r.stderr);
    return r.stdout.toString().trim();
  };
  const logs = async (id: string) => (await forkd(['logs', id], { env })).stdout.toString();

  // Two first starts of a size never started: one capture, both forked from it.
  const [a, b] = await Promise.all([create(), create()]);
  assert.match(a.snapshot ?? '', /^boot-[0-9a-f]{16}$/);
  assert.equal(b.snapshot, a.snapshot);
  const captures = daemon.output().match(/captured the boot snapshot of image busybox/g) ?? [];
  assert.equal(captures.length, 1, daemon.output());
  const c = await create();
  assert.equal(c.snapshot, a.snapshot);
  const ids = await Promise.all([a, b, c].map((s) => exec(s.id)));
  assert.equal(new Set(ids).size, 3, `boot_ids ${ids.join(' ')}`);
  assert.doesNotMatch(await logs(c.id), KERNEL_BANNER, 'the kernel did not boot');

  // The boot snapshot is hidden from `forkd snapshots` and shown by `snapshot info`.
  const listed = JSON.parse((await forkd(['snapshots', '--json'], { env })).stdout.toString());
  assert.deepEqual(listed, []);
  const info = await forkd(['snapshot', 'info', a.snapshot as string, '--json'], { env });
  const boot = JSON.parse(info.stdout.toString()).boot;
  assert.equal(boot?.image, 'busybox');
  assert.equal(boot?.memory_mib, 192);

  const cold = await create('--cold');
  assert.equal(cold.snapshot, null);
  assert.match(await logs(cold.id), KERNEL_BANNER, '--cold boots the kernel');
});
