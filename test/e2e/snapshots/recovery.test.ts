/**
 * Crash-safe branches: a real `forkd daemon` is SIGKILLed at exact steps of a branch
 * (FORKD_CRASH_FILE arms one crash point at a time: src/util/crash.ts) — with the intent
 * recorded, with the new layer made but not switched to, right after the switch (copy
 * mode, and live mode in the middle of its copy), after publish renamed the snapshot into
 * place, and during the start-up repair itself (and once with that repair failing: the
 * source is marked, with the reason, until the next start mends it) — twice in a row on one sandbox and across
 * two, restarting each time. Afterwards every listed snapshot forks and verifies (or is
 * `failed` with a reason: a `--no-wait` branch cut off), both sources run with their
 * data, no stray layer is left (not even one planted naming a snapshot that never
 * existed), and a new branch forks fine; then a branch cut off once its memory is a diff,
 * and a fork cut off while it materializes one, recover too; and a hibernation cut off
 * between ending QEMU and putting its capture in place comes back hibernated, not dead.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Sandbox, SandboxBrokenError, Snapshot } from '@forkd/sdk';
import { createLayerOver } from '../../../src/drivers/qemu/disk.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';

let home: TestHome;
let daemon: DaemonProcess | undefined;
let crashFile: string;

before(async () => {
  home = await makeTestHome();
  crashFile = join(home.dir, 'crash-at');
  home.env.FORKD_CRASH_FILE = crashFile;
  daemon = await startDaemon(home);
});

after(async () => {
  try {
    if (daemon) {
      const url = daemon.url;
      for (const sb of await Sandbox.list({ url }).catch(() => []))
        await Sandbox.kill(sb.id, { url }).catch(() => undefined);
      await daemon.stop();
    }
    await assertNoLeftovers(home);
  } finally {
    await home.cleanup();
  }
});

const url = () => (daemon as DaemonProcess).url;

/** Branch `id` with the daemon armed to die at `point`; wait for it to die. */
async function branchCrashingAt(
  id: string,
  tag: string,
  point: string,
  mode: 'copy' | 'live' = 'copy',
): Promise<void> {
  const d = daemon as DaemonProcess;
  await writeFile(crashFile, point);
  const res = await Sandbox.branch(id, { url: d.url, tag, mode }).catch((e: unknown) => e);
  await d.exited;
  assert.ok(res instanceof Error, `the branch at ${point} should not have answered`);
}

/** Restart; with `dieAt`, the restart itself is armed to die there first (a repair cut short). */
async function restart(dieAt?: string): Promise<void> {
  if (dieAt) {
    await writeFile(crashFile, dieAt);
    await assert.rejects(startDaemon(home), /SIGKILL/, `the restart should die at ${dieAt}`);
  }
  daemon = await startDaemon(home);
}

/** The source runs, its disk holds what it wrote, and it carries no broken-chain reason. */
async function assertSourceHealthy(id: string, files: string[]): Promise<void> {
  const sb = await Sandbox.connect(id, { url: url() });
  assert.equal(sb.info.state, 'running');
  assert.equal(sb.info.reason, undefined, `${id}: ${sb.info.reason}`);
  const r = await sb.commands.run(
    `sync; echo 3 > /proc/sys/vm/drop_caches; cat ${files.join(' ')}`,
  );
  assert.equal(r.stdout, files.map((f) => `${f}\n`).join(''));
}

async function write(id: string, file: string): Promise<void> {
  const sb = await Sandbox.connect(id, { url: url() });
  await sb.commands.run(`echo ${file} > ${file}; sync`);
}

/**
 * Every listed snapshot is `ready` (verifies, forks a child that answers) or `failed` with
 * a reason (a branch cut off: removed here); returns the ready ones.
 */
async function assertEverySnapshotForks(): Promise<string[]> {
  const tags: string[] = [];
  for (const info of await Snapshot.list({ url: url() })) {
    if (info.state === 'failed') {
      assert.ok(info.reason, info.tag);
      await Snapshot.remove(info.tag, { url: url() });
      continue;
    }
    const snap = await Snapshot.get(info.tag, { url: url() });
    assert.equal(snap.info.bootable, true, `${info.tag}: ${snap.info.reason}`);
    assert.deepEqual((await snap.verify()).problems, [], info.tag);
    const [kid] = await snap.forkAll(1);
    assert.equal((await (kid as Sandbox).commands.run('echo up')).stdout, 'up\n');
    await (kid as Sandbox).kill();
    tags.push(info.tag);
  }
  return tags;
}

/** No layer file a crashed branch made is left in a sandbox dir beyond the chain in use. */
async function layerFiles(id: string): Promise<string[]> {
  const names = await readdir(join(home.paths.sandboxes, id));
  return names.filter((n) => n.startsWith('overlay')).sort();
}

test('daemon killed at every step of a branch, twice in a row, on two sandboxes: all recovers', async () => {
  const a = (await Sandbox.create({ url: url() })).id;
  const b = (await Sandbox.create({ url: url() })).id;
  const aFiles = ['/root/a0'];
  const bFiles = ['/root/b0'];
  await write(a, '/root/a0');
  await write(b, '/root/b0');

  // The case: two branches of one sandbox cut off after the switch, in a row.
  for (const [i, point] of ['branch:switched', 'branch:switched'].entries()) {
    await branchCrashingAt(a, `a-cut${i}`, point);
    await restart();
    await assertSourceHealthy(a, aFiles);
    aFiles.push(`/root/a${i + 1}`);
    await write(a, `/root/a${i + 1}`);
  }
  // Before the switch (intent only; layer made), after publish's rename, mid live copy.
  await branchCrashingAt(b, 'b-intent', 'branch:intent');
  await restart();
  await branchCrashingAt(b, 'b-layer', 'branch:layer');
  await restart();
  await assertSourceHealthy(b, bFiles);
  await branchCrashingAt(a, 'a-pub', 'publish:renamed');
  await restart();
  await branchCrashingAt(b, 'b-live', 'branch:switched', 'live');
  await restart();
  await assertSourceHealthy(a, aFiles);
  await assertSourceHealthy(b, bFiles);
  // The repair itself killed mid-fold, then again after a second cut on the same sandbox.
  await branchCrashingAt(a, 'a-fold', 'branch:switched');
  await restart('fold:started');
  await assertSourceHealthy(a, aFiles);
  await branchCrashingAt(b, 'b-fold', 'branch:switched');
  await restart('fold:started');
  await assertSourceHealthy(b, bFiles);

  // A repair that fails: the source runs on, marked with the reason and the way out, and
  // cannot be branched; the next start repairs it and clears the mark.
  await branchCrashingAt(a, 'a-unrepaired', 'branch:switched');
  await writeFile(crashFile, 'repair:fold');
  daemon = await startDaemon(home);
  const marked = await Sandbox.connect(a, { url: url() });
  assert.equal(marked.info.state, 'running');
  assert.match(marked.info.reason ?? '', /disk chain broken.*forkd kill/);
  await assert.rejects(
    Sandbox.branch(a, { url: url(), tag: 'a-refused' }),
    (e: unknown) => e instanceof SandboxBrokenError,
  );
  await (daemon as DaemonProcess).stop();
  await restart();
  await assertSourceHealthy(a, aFiles);

  // Litter from before intents: a layer naming a snapshot that never existed goes at start.
  const ghost = join(home.paths.sandboxes, a, 'overlay-99.qcow2');
  const never = join(home.paths.snapshots, 'never', 'disk.qcow2');
  await createLayerOver(ghost, never, 64 << 20);
  // A --no-wait branch answered `writing`, then cut off while publishing: listed `failed`.
  await writeFile(crashFile, 'publish:renamed');
  const d = daemon as DaemonProcess;
  const answered = await Sandbox.branch(b, { url: d.url, tag: 'b-nowait', noWait: true });
  assert.equal(answered.snapshot.info.state, 'writing');
  await d.exited;
  await restart();
  const cut = await Snapshot.get('b-nowait', { url: url() });
  assert.equal(cut.info.state, 'failed');
  assert.match(cut.info.reason ?? '', /daemon stopped before this branch was published/);

  // A fork -n 3 cut off once its first child is up: its children are found by the request.
  await writeFile(crashFile, 'fork:child-up');
  const d2 = daemon as DaemonProcess;
  const base = await Snapshot.create({ url: d2.url, tag: 'fork-base' });
  const cutFork = base.fork({ n: 3, labels: { 'forkd.request': 'cut-run' } }).catch((e) => e);
  await d2.exited;
  assert.ok((await cutFork) instanceof Error, 'the fork should not have answered');
  await restart();
  const kids = await Sandbox.list({ url: url(), label: 'forkd.request=cut-run' });
  assert.ok(kids.length >= 1, 'the children of the cut-off fork are not found by its request');
  for (const k of kids) assert.ok(k.state === 'running' || k.reason, JSON.stringify(k));
  for (const k of kids) await Sandbox.kill(k.id, { url: url() }).catch(() => undefined);
  await Snapshot.remove('fork-base', { url: url() });

  // Nothing half-made is listed as ready; every layer file left is one the disk uses.
  assert.deepEqual(await assertEverySnapshotForks(), []);
  for (const id of [a, b]) assert.equal((await layerFiles(id)).length, 1, `stray layers in ${id}`);
  assert.deepEqual(
    (await readdir(home.paths.snapshots)).filter((n) => n.startsWith('.')),
    [],
    'staging dirs survived',
  );

  // A new branch of each source forks fine and carries what the source wrote.
  for (const [id, files] of [
    [a, aFiles],
    [b, bFiles],
  ] as const) {
    const res = await Sandbox.branch(id, { url: url(), tag: `${id}-ok`, fork: 1, mode: 'copy' });
    const kid = res.children?.sandboxes[0] as Sandbox;
    assert.equal(
      (await kid.commands.run(`cat ${files.join(' ')}`)).stdout,
      files.map((f) => `${f}\n`).join(''),
    );
    await kid.kill();
  }
  // Diff memory: a branch cut off once its memory was made a diff (before publishing) is
  // `failed`, its source repaired; a fork cut off while it materializes a diff leaves no
  // temp file, and the next fork builds it.
  await branchCrashingAt(a, 'a-diffcut', 'branch:diffed');
  await restart();
  await assertSourceHealthy(a, aFiles);
  const diff = await Sandbox.branch(a, { url: url(), tag: 'a-diff', mode: 'copy' });
  assert.equal(diff.snapshot.info.memory?.kind, 'diff');
  assert.equal(diff.snapshot.info.memory?.parent, `${a}-ok`);
  await writeFile(crashFile, 'memory:materialized');
  const d3 = daemon as DaemonProcess;
  const cutMaterialize = diff.snapshot.fork({ n: 1 }).catch((e: unknown) => e);
  await d3.exited;
  assert.ok((await cutMaterialize) instanceof Error, 'the fork should not have answered');
  await restart();
  const left = await readdir(join(home.paths.snapshots, 'a-diff'));
  assert.deepEqual(
    left.filter((n) => n.startsWith('.')),
    [],
    'a half-built memory survived',
  );
  assert.equal((await assertEverySnapshotForks()).length, 3);
  // A hibernation cut off after its QEMU ended, before its capture took its names: the
  // restarted daemon holds it hibernated (not dead), and a command restores it.
  await writeFile(crashFile, 'hibernate:ended');
  const d4 = daemon as DaemonProcess;
  const cutHibernate = Sandbox.connect(b, { url: d4.url })
    .then((sb) => sb.pause({ tier: 'hibernated' }))
    .catch((e: unknown) => e);
  await d4.exited;
  assert.ok((await cutHibernate) instanceof Error, 'the hibernation should not have answered');
  await restart();
  const held = (await Sandbox.connect(b, { url: url() })).info;
  assert.deepEqual([held.state, held.tier, held.pid], ['running', 'hibernated', null]);
  await assertSourceHealthy(b, bFiles); // restored by the command, its files there
  for (const id of [a, b]) await Sandbox.kill(id, { url: url() });
  await Snapshot.remove('a-diff', { url: url() });
  for (const id of [a, b]) await Snapshot.remove(`${id}-ok`, { url: url() });
});
