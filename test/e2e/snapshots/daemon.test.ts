/**
 * Snapshots through a real `forkd daemon` (SDK and CLI), and the daemon SIGKILLed in the
 * middle of `snapshot create`, of a branch and of a live branch's copy: after a restart no
 * half snapshot is listed as whole (a branch cut off is `failed`, with the reason, and the
 * CLI's verbs say so of it) and no stray QEMU, process or file remains.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { Sandbox, Snapshot, SnapshotNotFoundError } from '@forkd/sdk';
import { assertNoLeftovers, makeTestHome, qemusUnder, type TestHome } from '../../helpers/home.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { forkd } from '../../helpers/cli.js';
import { childrenOf } from '../../helpers/ram.js';

let home: TestHome;
let daemon: DaemonProcess | undefined;

before(async () => {
  home = await makeTestHome();
  daemon = await startDaemon(home);
});

after(async () => {
  try {
    if (daemon) {
      const url = daemon.url;
      for (const sb of await Sandbox.list({ url }))
        await Sandbox.kill(sb.id, { url }).catch(() => undefined);
      await daemon.stop();
    }
    await assertNoLeftovers(home);
  } finally {
    await home.cleanup();
  }
});

test('SDK: create a snapshot with progress, fork it, fork one with Sandbox.create', async () => {
  const url = (daemon as DaemonProcess).url;
  const progress: string[] = [];
  const snap = await Snapshot.create({
    url,
    tag: 'sdk-warm',
    warm: ['echo from-parent > /root/p.txt'],
    onProgress: (m) => progress.push(m),
  });
  assert.ok(
    progress.some((m) => m.includes('warm')),
    progress.join(' | '),
  );
  assert.equal(snap.info.bootable, true);
  const children = await snap.forkAll(3);
  for (const sb of children) {
    const r = await sb.commands.run('cat /root/p.txt');
    assert.equal(r.stdout, 'from-parent\n');
  }
  const one = await Sandbox.create({ url, snapshot: 'sdk-warm' });
  assert.equal(one.info.snapshot, 'sdk-warm');
  assert.equal((await one.commands.run('cat /root/p.txt')).stdout, 'from-parent\n');
  await Promise.all([...children, one].map((sb) => sb.kill()));
  await assert.rejects(Snapshot.get('nope', { url }), SnapshotNotFoundError);
});

test('CLI: snapshots, fork, rmi', async () => {
  const env = { ...home.env, FORKD_URL: (daemon as DaemonProcess).url };
  const list = await forkd(['snapshots', '--json'], { env });
  assert.equal(list.code, 0, list.stderr);
  const tags = (JSON.parse(list.stdout.toString()) as { tag: string }[]).map((s) => s.tag);
  assert.ok(tags.includes('sdk-warm'));
  const fork = await forkd(['fork', 'sdk-warm', '-n', '2', '--json'], { env });
  assert.equal(fork.code, 0, fork.stderr);
  const rmi = await forkd(['rmi', 'sdk-warm'], { env });
  assert.notEqual(rmi.code, 0, 'rmi must refuse while forks run');
  assert.match(rmi.stderr, /snapshot_in_use/);
  const forced = await forkd(['rmi', 'sdk-warm', '--force'], { env });
  assert.equal(forced.code, 0, forced.stderr);
  assert.deepEqual(await readdir(home.paths.snapshots), []);
});

test('daemon SIGKILLed during snapshot create: nothing half-made survives a restart', async () => {
  const d = daemon as DaemonProcess;
  let sawWarm!: () => void;
  const warming = new Promise<void>((resolve) => (sawWarm = resolve));
  const creating = Snapshot.create({
    url: d.url,
    tag: 'half',
    warm: ['sleep 30'],
    onProgress: (m) => m.startsWith('warm') && sawWarm(),
  }).catch((e: unknown) => e);
  await warming;
  assert.ok((await qemusUnder(home.dir)).length > 0, 'the parent VM should be running');
  process.kill(d.pid, 'SIGKILL');
  await creating;
  daemon = await startDaemon(home);
  await assert.rejects(Snapshot.get('half', { url: daemon.url }), SnapshotNotFoundError);
  assert.deepEqual(await Snapshot.list({ url: daemon.url }), []);
  assert.deepEqual(await readdir(home.paths.snapshots), [], 'a staging dir survived');
  assert.deepEqual(await qemusUnder(home.dir), [], 'the parent QEMU survived');
});

test('SDK: branch a running sandbox, fork its branch; tree shows the lineage', async () => {
  const url = (daemon as DaemonProcess).url;
  const src = await Sandbox.create({ url });
  await src.commands.run('echo before > /root/b.txt');
  const res = await src.branch({ tag: 'br', fork: 2 });
  assert.equal(res.mode, 'live', 'the default where `forkd doctor` says live-branch PASS');
  assert.ok(res.pauseMs > 0, 'pause_ms is reported');
  assert.ok(res.capturedBytes > 0);
  assert.equal(res.children?.sandboxes.length, 2);
  for (const kid of res.children?.sandboxes ?? []) {
    assert.equal((await kid.commands.run('cat /root/b.txt')).stdout, 'before\n');
  }
  assert.equal(
    (await src.commands.run('echo after > /root/b.txt; cat /root/b.txt')).stdout,
    'after\n',
  );
  const tree = await forkd(['tree', '--json'], { env: { ...home.env, FORKD_URL: url } });
  assert.equal(tree.code, 0, tree.stderr);
  const nodes = JSON.parse(tree.stdout.toString()) as {
    nodes: { kind: string; id: string; parent: { id: string } | null }[];
  };
  const kids = nodes.nodes.filter((n) => n.kind === 'sandbox' && n.parent?.id === 'br');
  assert.equal(kids.length, 2);
  await Promise.all([src, ...(res.children?.sandboxes ?? [])].map((sb) => sb.kill()));
  await Snapshot.remove('br', { url });
});

test('daemon SIGKILLed during a branch: the source runs on, no half snapshot is listed', async () => {
  const d = daemon as DaemonProcess;
  const src = await Sandbox.create({ url: d.url });
  const branching = src.branch({ tag: 'cut', mode: 'copy' }).catch((e: unknown) => e);
  await new Promise((r) => setTimeout(r, 150)); // somewhere inside the capture or checksums
  process.kill(d.pid, 'SIGKILL');
  await branching;
  daemon = await startDaemon(home);
  const again = await Sandbox.connect(src.id, { url: daemon.url });
  assert.equal(again.info.state, 'running');
  assert.equal((await again.commands.run('echo alive')).stdout, 'alive\n');
  const tags = (await Snapshot.list({ url: daemon.url })).map((s) => s.tag);
  if (tags.includes('cut')) {
    // Published before the kill, or cut off: then listed `failed` with the reason.
    const { info } = await Snapshot.get('cut', { url: daemon.url });
    assert.ok(info.bootable || (info.state === 'failed' && info.reason), JSON.stringify(info));
  }
  const stale = (await readdir(home.paths.snapshots)).filter((n) => n.startsWith('.staging'));
  assert.deepEqual(stale, [], 'a staging dir survived');
  await again.kill();
  if (tags.includes('cut')) await Snapshot.remove('cut', { url: daemon.url });
});

test('daemon SIGKILLed during a live copy: copier and frozen fork end, restart reaps, source runs on', async () => {
  // Live copies crawl (0.1 s per 2 MiB) in this daemon, so that it dies in the middle of one.
  await (daemon as DaemonProcess).stop();
  home.env.FORKD_LIVE_THROTTLE_MS = '100';
  const d = await startDaemon(home).finally(() => delete home.env.FORKD_LIVE_THROTTLE_MS);
  daemon = d;
  const src = await Sandbox.create({ url: d.url });
  const qemu = src.info.pid as number;
  const res = await src.branch({ tag: 'live-cut', mode: 'live', noWait: true });
  assert.equal(res.mode, 'live');
  const copiers = (await childrenOf(d.pid)).filter((p) => p.comm === 'forkd-capture');
  assert.equal(copiers.length, 1, 'the copier should still be copying');
  assert.equal((await childrenOf(qemu)).length, 1, 'the frozen fork should exist');
  process.kill(d.pid, 'SIGKILL');
  const gone = async () =>
    !existsSync(`/proc/${copiers[0]?.pid}`) &&
    (await childrenOf(qemu)).every((p) => p.state === 'Z');
  for (let i = 0; i < 50 && !(await gone()); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(await gone(), 'the copier or the frozen fork outlived the daemon');
  // Killed, the fork is a zombie until its parent QEMU reaps it: the restart makes it.
  assert.deepEqual(
    (await childrenOf(qemu)).map((p) => p.state),
    ['Z'],
  );
  daemon = await startDaemon(home);
  assert.deepEqual(await childrenOf(qemu), [], 'QEMU still has a child after the restart');
  const again = await Sandbox.connect(src.id, { url: daemon.url });
  assert.equal(again.info.state, 'running');
  assert.equal((await again.commands.run('echo alive')).stdout, 'alive\n');
  const cut = await Snapshot.get('live-cut', { url: daemon.url });
  assert.equal(cut.info.state, 'failed', 'the half-copied snapshot is listed as if whole');
  assert.match(cut.info.reason ?? '', /daemon stopped/);
  // Listed with its state, and every verb given it says it failed, why, and how to remove it.
  const env = { ...home.env, FORKD_URL: daemon.url };
  const list = await forkd(['snapshots'], { env });
  assert.match(list.stdout.toString(), /^live-cut\s+failed\s/m);
  assert.match(
    list.stderr,
    /live-cut cannot be forked: failed: the daemon stopped .*forkd rmi live-cut/,
  );
  for (const args of [
    ['snapshot', 'verify', 'live-cut'],
    ['fork', 'live-cut'],
  ]) {
    const r = await forkd(args, { env });
    assert.equal(r.code, 4, `${args.join(' ')}: ${r.stderr}`);
    assert.match(
      r.stderr,
      /failed and cannot be used: the daemon stopped .*`forkd rmi live-cut` \[snapshot_failed\]/,
    );
  }
  const stale = (await readdir(home.paths.snapshots)).filter((n) => n.startsWith('.staging'));
  assert.deepEqual(stale, [], 'a staging dir survived');
  await again.kill();
  await Snapshot.remove('live-cut', { url: daemon.url });
});
