/**
 * Boot snapshots captured before any start (docs/images.md "The boot snapshot, captured at
 * build"): `image build` captures the image's boot snapshot with progress on stderr, so
 * even the first `forkd run` restores; `--no-boot-snapshot` skips it; a capture that fails
 * is a warning and the image is kept. Through a daemon the build captures the daemon's
 * size and NIC, and an image rebuilt under the same name gets its boot snapshots captured
 * again in the background, the old ones gone; removed through it, their pool VMs end.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { HOST_BUSYBOX } from '../../../src/services/images/index.js';
import { assertNoLeftovers, makeTestHome, qemusUnder, type TestHome } from '../../helpers/home.js';
import { bootDaemon } from '../../helpers/boot-daemon.js';
import { forkd } from '../../helpers/cli.js';

interface ImageJson {
  name: string;
  boot_snapshots?: { tag: string; memory_mib: number; network: string; current: boolean }[];
}

let home: TestHome;
let tree: string;
before(async () => {
  home = await makeTestHome();
  tree = await mkdtemp(join(tmpdir(), 'forkd-eager-tree-'));
  await mkdir(join(tree, 'bin'), { recursive: true });
  await copyFile(HOST_BUSYBOX, join(tree, 'bin', 'busybox'));
  for (const applet of ['sh', 'cat']) await symlink('busybox', join(tree, 'bin', applet));
});
after(async () => {
  await rm(tree, { recursive: true, force: true });
  await home.cleanup();
});

/** `forkd image build` of the tree with `marker` in /marker. */
async function build(env: NodeJS.ProcessEnv, name: string, marker: string, ...flags: string[]) {
  await writeFile(join(tree, 'marker'), `${marker}\n`);
  const args = ['image', 'build', '--from-dir', tree, '--name', name, '--size', '64M', ...flags];
  const r = await forkd(args, { env });
  assert.equal(r.code, 0, r.stderr);
  return r.stderr;
}

async function image(env: NodeJS.ProcessEnv, name: string): Promise<ImageJson | undefined> {
  const r = await forkd(['images', '--json'], { env });
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout.toString()) as ImageJson[]).find((i) => i.name === name);
}

const READY = /boot snapshot (boot-[0-9a-f]{16}) of image \S+ ready \((.*)\)/;

test('image build (no daemon) captures the boot snapshot: the first run restores it; --no-boot-snapshot skips it; a failed capture is a warning', async () => {
  const env = home.env;
  const said = await build(env, 'eager', 'one');
  assert.match(said, /capturing the boot snapshot of image eager \(skip with --no-boot-snapshot\)/);
  const [, tag, detail] = READY.exec(said) ?? [];
  assert.ok(tag, said);
  assert.match(detail ?? '', /^256 MiB, 1 vCPU, network none; captured in \d+ ms$/);

  // The first run of the image: a restore of what the build captured, nothing captured now.
  const run = await forkd(['run', '-v', '--image', 'eager', '--', 'cat', '/marker'], { env });
  assert.equal(run.stdout.toString(), 'one\n', run.stderr);
  assert.equal(run.stderr, `forkd: restored boot snapshot ${tag} of image eager\n`);

  const skipped = await build(env, 'lazy', 'two', '--no-boot-snapshot');
  assert.doesNotMatch(skipped, /boot snapshot/);
  assert.equal((await image(env, 'lazy'))?.boot_snapshots, undefined);

  // A capture that fails (injected): the build succeeds with a warning, the image is there,
  // and its first start captures.
  const crash = join(home.dir, 'crash');
  await writeFile(crash, 'boot:capture');
  const failing = await build({ ...env, FORKD_CRASH_FILE: crash }, 'failing', 'three');
  assert.match(
    failing,
    /warning: no boot snapshot of image failing \(injected failure at boot:capture\): its first start captures one/,
  );
  assert.ok(await image(env, 'failing'), 'the image is kept');
  const first = await forkd(['run', '-v', '--image', 'failing', '--', 'cat', '/marker'], { env });
  assert.equal(first.stdout.toString(), 'three\n', first.stderr);
  assert.match(first.stderr, /captured it in \d+ ms, then restored boot snapshot/);

  for (const name of ['eager', 'lazy', 'failing']) {
    assert.equal((await forkd(['image', 'rm', name], { env })).code, 0);
  }
  await assertNoLeftovers(home);
});

test('through the daemon: image build captures its size and NIC; a rebuild under the same name is captured again in the background', async (t) => {
  // A pool of one per boot snapshot (tests run with none): `image rm` must end it.
  const served = await bootDaemon(t, home, ['--default-pool', '1']);
  const { daemon, env } = served;
  const create = (...args: string[]) => served.create('--image', 'served', ...args);
  const captures = () =>
    daemon.output().match(/captured the boot snapshot of image served/g)?.length ?? 0;

  const said = await build(env, 'served', 'one');
  const [, tag256] = READY.exec(said) ?? [];
  assert.match(said, /ready \(256 MiB, 1 vCPU, network nat\)/);
  assert.equal(captures(), 1, daemon.output());
  const a = await create();
  assert.equal(a.snapshot, tag256, 'the first create forks what the build captured');
  const b = await create('--memory', '192M'); // another size: captured at its first start
  assert.equal(captures(), 2);
  for (const s of [a, b]) assert.equal((await forkd(['kill', s.id], { env })).code, 0);
  const before = (await image(env, 'served'))?.boot_snapshots?.map((x) => x.tag).sort();
  assert.equal(before?.length, 2);

  // Rebuilt under the same name, nothing captured by the build itself: the daemon captures
  // both sizes again for the new image in the background.
  await build(env, 'served', 'two', '--force', '--no-boot-snapshot');
  let now: ImageJson['boot_snapshots'] = [];
  for (let i = 0; i < 600; i++) {
    now = (await image(env, 'served'))?.boot_snapshots ?? [];
    if (now.length === 2 && now.every((x) => x.current)) break;
    await sleep(1000);
  }
  assert.deepEqual(now?.map((x) => [x.memory_mib, x.network, x.current]).sort(), [
    [192, 'nat', true],
    [256, 'nat', true],
  ]);
  assert.match(daemon.output(), /recaptured the boot snapshot of image served in the background/);
  for (const t of before ?? []) assert.ok(!now?.some((x) => x.tag === t), `old ${t} is gone`);

  const c = await create('--memory', '192M');
  assert.ok(
    now?.some((x) => x.tag === c.snapshot),
    'forked from the new boot snapshot',
  );
  const marker = await forkd(['exec', c.id, '--', 'cat', '/marker'], { env });
  assert.equal(marker.stdout.toString(), 'two\n');
  const info = await forkd(['info', c.id, '--json'], { env });
  const cPid = (JSON.parse(info.stdout.toString()) as { pid: number }).pid;
  assert.equal((await forkd(['kill', c.id], { env })).code, 0);

  // The boot snapshots' pool VMs (one each; pre-warmed though the image has no `true`) go
  // with the image when it is removed through the daemon, as `forkd image rm` does when one
  // runs.
  const poolVms = async () => {
    const pids = await qemusUnder(home.dir);
    const cmds = await Promise.all(pids.map((p) => readFile(`/proc/${p}/cmdline`, 'utf8')));
    return pids.filter((p, i) => p !== cPid && now?.some((x) => cmds[i]?.includes(x.tag)));
  };
  let pooled: number[] = [];
  for (let i = 0; i < 180 && pooled.length === 0; i++) {
    pooled = await poolVms();
    if (pooled.length === 0) await sleep(1000);
  }
  const poolLog = daemon
    .output()
    .split('\n')
    .filter((l) => /pool/i.test(l))
    .slice(-10);
  assert.ok(pooled.length > 0, `no pool VM of the boot snapshots to end: ${poolLog.join('\n')}`);
  assert.equal((await forkd(['image', 'rm', 'served'], { env })).code, 0);
  assert.deepEqual(await poolVms(), [], 'a pool VM of a removed boot snapshot runs on');
});
