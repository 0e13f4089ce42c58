/**
 * Processes killed mid-operation under a real daemon. The capture helper (forkd-capture)
 * SIGKILLed mid-command: the daemon's FORKD_CAPTURE_BIN is a wrapper that runs the real
 * helper and kills the run a test arms ("pages 2": the second page copy from now) once it
 * has started: during a snapshot
 * create's page copy, and during a copy branch's page copy made while the source is paused.
 * Each fails with an error naming the helper and its death, leaves nothing under the tag
 * (not by name, not listed, not on disk, no staging dir), no QEMU of the create; the
 * branch's source resumes and runs on with its files, and branches again. Then the daemon
 * itself SIGKILLed: while mkfs.ext4 builds an image, and during a pack push to a real
 * loopback registry (while tar compresses a layer, and by a crash point once every blob is
 * up, before the manifest; the tool, armed through a shim on the daemon's PATH, holds on once
 * its work is done, so the kill always lands while it runs): the tool dies with the daemon
 * (forkd-tool-exec), and after a
 * restart there is no staging or work dir, no image and no tag under the name, and the same
 * build or push works. Last, SIGKILLed during a pack pull (mid-download through a stalling
 * proxy, while tar extracts a layer, and by a crash point between the parent's install and
 * the branch's): after a restart nothing is half installed, no staging dir or process is
 * left, and the pull resumes.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readdir, realpath, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Forkd, Sandbox, Snapshot, SnapshotNotFoundError } from '@forkd/sdk';
import { CAPTURE_BINARY } from '../../../src/drivers/qemu/helper.js';
import { assertNoLeftovers, makeTestHome, qemusUnder, type TestHome } from '../../helpers/home.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import {
  assertNoOrphans,
  assertToolsGone,
  holdingTools,
  killWhen,
  namesIn,
  type HoldingTools,
} from '../../helpers/daemon-kill.js';
import { forkd } from '../../helpers/cli.js';
import { cuttingProxy } from '../images/cutting-proxy.js';
import { startRegistry, type TestRegistry } from '../images/registry.js';

let home: TestHome;
let daemon: DaemonProcess | undefined;
let scratch: string;
let arm: string;
let reg: TestRegistry | undefined;
let tools: HoldingTools;
/** What a tool the daemon ran may leave running if it outlives the daemon. */
const TOOLS = ['mkfs.ext4', 'tar', 'zstd', 'sleep', 'forkd-tool-exec'];

/**
 * Runs the real helper; the run `$arm` names is SIGKILLed once exec'd, and the wrapper (the
 * process the daemon runs) dies the same way before it can answer. On a loaded host the
 * real run may finish before the wrapper sees it exec'd: the daemon's view is the same (a
 * helper SIGKILLed with no answer), so that run counts as killed too.
 */
const wrapper = (real: string, armFile: string) => `#!/bin/sh
real='${real}'; arm='${armFile}'
if read -r cmd n < "$arm" 2>/dev/null && [ "$cmd" = "$1" ]; then
  if [ "$n" -gt 1 ]; then echo "$cmd $((n - 1))" > "$arm"; exec "$real" "$@"; fi
  rm -f "$arm"
  "$real" "$@" &
  pid=$!
  until [ "$(readlink /proc/$pid/exe)" = "$real" ]; do kill -0 $pid 2>/dev/null || break; done
  kill -9 $pid 2>/dev/null
  echo "$cmd" > "$arm.killed"
  wait $pid
  kill -9 $$
fi
exec "$real" "$@"
`;

before(async () => {
  home = await makeTestHome();
  scratch = await mkdtemp(join(tmpdir(), 'forkd-capture-kill-'));
  arm = join(scratch, 'arm');
  const bin = join(scratch, 'forkd-capture');
  await writeFile(bin, wrapper(await realpath(CAPTURE_BINARY), arm));
  await chmod(bin, 0o755);
  home.env.FORKD_CAPTURE_BIN = bin;
  home.env.FORKD_CRASH_FILE = join(scratch, 'crash');
  tools = await holdingTools(scratch, ['mkfs.ext4', 'tar']);
  home.env.PATH = `${tools.bin}:${home.env.PATH ?? '/usr/bin:/bin'}`;
  daemon = await startDaemon(home);
});

after(async () => {
  try {
    if (daemon) {
      for (const sb of await Sandbox.list({ url: daemon.url }))
        await Sandbox.kill(sb.id, { url: daemon.url }).catch(() => undefined);
      await daemon.stop();
    }
    await assertNoLeftovers(home);
  } finally {
    await reg?.stop();
    await home.cleanup();
    await rm(scratch, { recursive: true, force: true });
  }
});

/** One loopback registry for the pack cases (started by the first). */
async function registry(): Promise<TestRegistry> {
  reg ??= await startRegistry();
  return reg;
}

const cli = (args: string[]) => forkd(args, { env: { ...home.env, FORKD_URL: daemon!.url } });

/** Start the daemon again: no snapshot staging dir, no process of the home but it. */
async function restart(): Promise<void> {
  daemon = await startDaemon(home);
  assert.deepEqual(await namesIn(home.paths.snapshots, (n) => n.startsWith('.')), []);
  await assertNoOrphans(home, daemon);
}

/** The daemon died by the armed crash point within 30 s of `op`'s failure. */
async function diedAt(op: Promise<{ code: number | null; stderr: string }>): Promise<void> {
  const r = await op;
  const died = await Promise.race([
    daemon!.exited.then(() => true),
    sleep(30_000).then(() => false),
  ]);
  assert.ok(died, `the crash point was not reached: ${r.stderr}`);
  assert.notEqual(r.code, 0, 'the CLI reported success for an operation whose daemon died');
}

/** Arm the kill of the `nth` run of `command` from now. */
async function killRun(command: string, nth: number): Promise<void> {
  await rm(`${arm}.killed`, { force: true });
  await writeFile(arm, `${command} ${nth}\n`);
}

async function assertKilled(): Promise<void> {
  await stat(`${arm}.killed`).catch(() => assert.fail('the helper was never killed'));
}

/** The operation's error names the helper and that it was killed. */
function isHelperDeath(e: unknown): boolean {
  const err = e as { code?: string; message?: string };
  assert.match(err.message ?? '', /forkd-capture pages was killed \(SIGKILL\)/, String(e));
  assert.notEqual(err.code, undefined, 'not a catalog error');
  return true;
}

/** Nothing under `tag`: not by name, not listed, not on disk, no staging dir. */
async function assertNothingUnder(tag: string, listed: string[]): Promise<void> {
  const url = daemon!.url;
  await assert.rejects(Snapshot.get(tag, { url }), SnapshotNotFoundError);
  assert.deepEqual((await Snapshot.list({ url })).map((s) => s.tag).sort(), listed);
  // An image's boot snapshot (hidden, docs/snapshots.md) is not what the kill left.
  const files = (await readdir(home.paths.snapshots)).filter((n) => !/^boot-[0-9a-f]+$/.test(n));
  assert.deepEqual(files.sort(), listed, 'left in snapshots/');
}

test('the helper killed during a snapshot create: a clear error, no snapshot, no QEMU', async () => {
  await killRun('pages', 1);
  await assert.rejects(
    Snapshot.create({ url: daemon!.url, tag: 'cut', warm: ['echo warm > /root/w'] }),
    isHelperDeath,
  );
  await assertKilled();
  await assertNothingUnder('cut', []);
  assert.deepEqual(await qemusUnder(home.dir), [], 'the parent QEMU was left');
  assert.deepEqual(await readdir(home.paths.sandboxes).catch(() => []), [], 'a sandbox dir');
});

test('the helper killed during a copy branch (source paused): nothing under the tag, the source runs on', async (t) => {
  const url = daemon!.url;
  // Booted, not forked from the image's boot snapshot: its copy branch captures its memory
  // whole (the `pages` run killed below), not as a diff.
  const src = await Sandbox.create({ url, cold: true });
  // Ended even when an assertion fails, so the next cases' restarts find no QEMU of this home.
  t.after(() => Sandbox.kill(src.id, { url: daemon!.url }).catch(() => undefined));
  await src.commands.run('echo kept > /root/kept');
  await killRun('pages', 2); // the second copy: the one made while the source is paused
  await assert.rejects(src.branch({ tag: 'cut', mode: 'copy' }), isHelperDeath);
  await assertKilled();
  await assertNothingUnder('cut', []);
  const again = await Sandbox.connect(src.id, { url });
  assert.equal(again.info.state, 'running');
  assert.equal((await again.commands.run('cat /root/kept')).stdout, 'kept\n');
  const ok = await again.branch({ tag: 'after', mode: 'copy' });
  assert.equal(ok.snapshot.info.tag, 'after');
  await again.kill(); // 'after' stays for the pack pull
});

test('the daemon SIGKILLed while mkfs.ext4 builds an image: mkfs dies with it, no staging dir, no image; the build then works', async () => {
  const tree = join(scratch, 'tree'); // 8 MiB that mkfs.ext4 copies into the image
  await mkdir(tree);
  for (let i = 0; i < 2; i++) await writeFile(join(tree, `f${i}`), randomBytes(4 << 20));
  const images = () => new Forkd({ url: daemon!.url }).images;
  await tools.arm('mkfs.ext4');
  const building = images()
    .create({ name: 'cut', fromDir: tree })
    .then(
      () => 'built',
      (e: unknown) => e,
    );
  await killWhen(daemon!, () => tools.holding('mkfs.ext4'), 'mkfs.ext4');
  assert.notEqual(await building, 'built', 'the build reported success from a killed daemon');
  const staged = () => namesIn(home.paths.images, (n) => n.startsWith('.staging-'));
  assert.equal((await staged()).length, 1, 'no staging dir when the daemon was killed');
  await assertToolsGone(home, TOOLS);
  await restart();
  assert.deepEqual(await staged(), [], 'the staging dir was left');
  await assert.rejects(images().get('cut'), (e: { code?: string }) => e.code === 'image_not_found');
  assert.equal((await images().create({ name: 'cut', fromDir: tree })).name, 'cut');
  await images().remove('cut');
  await rm(tree, { recursive: true, force: true });
});

test('the daemon SIGKILLed mid pack push (compressing a layer, then before the manifest): no work dir, no tag; the push then works', async () => {
  const r = await registry();
  const ref = `${r.host}/team/env:after`;
  const push = () => cli(['push', 'after', ref, '--format', 'files', '--json']);
  const work = () => namesIn(join(home.paths.home, 'cache', 'packs'), (n) => n.startsWith('work-'));
  const tags = async () => {
    const res = await fetch(`http://${r.host}/v2/team/env/tags/list`);
    return res.ok ? (((await res.json()) as { tags?: string[] | null }).tags ?? []) : [];
  };

  // 1. Killed while tar compresses a layer into the push's work dir (the first layer's tar
  // holds on once it has written it).
  await tools.arm('tar');
  const cut = push();
  await killWhen(daemon!, () => tools.holding('tar'), 'the layer compression');
  assert.notEqual((await cut).code, 0, 'the CLI reported success for a push whose daemon died');
  assert.notDeepEqual(await work(), [], 'no work dir when the daemon was killed');
  await assertToolsGone(home, TOOLS);
  await restart();
  assert.deepEqual(await work(), [], 'the work dir was left');
  assert.deepEqual(await tags(), [], 'a tag of a push that never finished');

  // 2. Killed by a crash point with every blob up, before the manifest that names them.
  await writeFile(join(scratch, 'crash'), 'pack:blobs-pushed');
  await diedAt(push());
  await restart();
  assert.deepEqual(await work(), [], 'the work dir was left');
  assert.deepEqual(await tags(), [], 'a tag without its manifest');

  // 3. The same push works.
  const ok = await push();
  assert.equal(ok.code, 0, ok.stderr);
  assert.deepEqual(await tags(), ['after']);
  assert.deepEqual(await work(), []);
});

test('the daemon SIGKILLed mid pack pull (downloading, extracting, then between installs): nothing half installed, the pull resumes', async () => {
  const reg = await registry();
  const proxy = await cuttingProxy(reg.host, 256 * 1024, 'stall');
  const ref = (host: string) => `${host}/team/env:after2`;
  const pull = (host: string) => cli(['pull', ref(host), '--json']);
  const listed = async () => (await Snapshot.list({ url: daemon!.url })).map((x) => x.tag).sort();
  const blobs = join(home.paths.home, 'cache', 'packs', 'blobs');
  try {
    // A chain of two (a branch of a fork of 'after'), pushed, then removed here.
    const [kid] = await (await Snapshot.get('after', { url: daemon!.url })).forkAll(1);
    await kid!.commands.run('echo two > /root/2; sync');
    await kid!.branch({ tag: 'after2', mode: 'copy' });
    await kid!.kill();
    const pushed = await cli(['push', 'after2', ref(reg.host), '--format', 'files', '--json']);
    assert.equal(pushed.code, 0, pushed.stderr);
    await Snapshot.remove('after2', { url: daemon!.url });
    await Snapshot.remove('after', { url: daemon!.url });

    // 1. Killed while a blob downloads (the stalled proxy holds it after 256 KiB).
    const cut = pull(proxy.host);
    const partial = async () => (await namesIn(blobs, (n) => n.endsWith('.partial'))).length > 0;
    await killWhen(daemon!, partial, 'the pack download');
    assert.notEqual((await cut).code, 0, 'the CLI reported success for a pull whose daemon died');
    await restart();
    assert.deepEqual(await listed(), [], 'something was installed');

    // 1b. Killed while tar extracts a downloaded layer into the staging dir (it holds on).
    await tools.arm('tar');
    const extracting = pull(reg.host);
    await killWhen(daemon!, () => tools.holding('tar'), 'the layer extraction');
    assert.notEqual((await extracting).code, 0, 'the CLI reported success from a killed daemon');
    const staged = await namesIn(home.paths.snapshots, (n) => n.startsWith('.staging-pack-'));
    assert.equal(staged.length, 1, 'no staging dir when the daemon was killed');
    await assertToolsGone(home, TOOLS);
    await restart(); // no staging dir among the snapshots', no process of the home
    assert.deepEqual(await listed(), [], 'something was installed');

    // 2. Killed by a crash point once the parent is installed, before the branch is.
    await writeFile(join(scratch, 'crash'), 'pack:installed');
    await diedAt(pull(reg.host));
    await restart();
    assert.deepEqual(await listed(), ['after'], 'the parent whole, the branch absent');
    const verify = await cli(['snapshot', 'verify', 'after', '--json']);
    assert.equal(verify.code, 0, verify.stdout.toString());

    // 3. The same pull: the branch lands on the parent already here.
    const ok = await pull(reg.host);
    assert.equal(ok.code, 0, ok.stderr);
    assert.deepEqual(await listed(), ['after', 'after2']);
    assert.deepEqual(await namesIn(blobs, (n) => n.endsWith('.partial')), []);
    await Snapshot.remove('after2', { url: daemon!.url });
    await Snapshot.remove('after', { url: daemon!.url });
  } finally {
    await proxy.close();
  }
});
