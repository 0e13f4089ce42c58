/**
 * Two real nodes and a registry (real VMs under TCG): two `forkd daemon` processes, each in a
 * network namespace of its own with its own FORKD_HOME, and Debian's `docker-registry` in a
 * third (nodes-net.ts). Both daemons run with a network namespace per sandbox (`nat`), so
 * their sandboxes' namespaces, veths and DNS proxies share the host at once. Node A makes a
 * warm snapshot and pushes it; B forks it by reference with no pull, and its child has A's
 * warm state; A branches a child that wrote 10 MiB and pushes the branch: uploaded and
 * downloaded bytes stay within 2× of what it changed; the branch's chain takes base's chunks
 * from B's cache. The registry stopped mid-pull: the fork fails clearly, nothing is
 * installed; started again, the next fork fetches only the chunks B lacks.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Forkd, Sandbox, Snapshot } from '@forkd/sdk';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { assertNoNetworkLeft } from '../../helpers/netcheck.js';
import { makeNodes, type Nodes } from './nodes-net.js';

const MIB = 1048576;
let nodes: Nodes;
let homeA: TestHome;
let homeB: TestHome;
let a: DaemonProcess;
let b: DaemonProcess;
const started: Sandbox[] = [];

const on = (d: DaemonProcess) => ({ url: d.url });
const cacheOf = () => new Forkd(on(b)).packs.cache();
const ref = (tag: string) => `${nodes.registry}/team/env:${tag}`;

async function fork1(d: DaemonProcess, snapshot: string): Promise<Sandbox> {
  const r = await Snapshot.fork(snapshot, { n: 1, ...on(d) });
  assert.equal(r.failed.length, 0, JSON.stringify(r.failed));
  started.push(r.sandboxes[0]!);
  return r.sandboxes[0]!;
}

async function sh(s: Sandbox, cmd: string): Promise<string> {
  return (await s.commands.run(cmd)).stdout;
}

async function kill(s: Sandbox): Promise<void> {
  await s.kill();
  started.splice(started.indexOf(s), 1);
}

/** Bytes on disk of a snapshot's own files (what it changed over its parent). */
async function ownBytes(home: TestHome, tag: string): Promise<number> {
  const dir = join(home.paths.snapshots, tag);
  let n = 0;
  for (const f of await readdir(dir)) n += (await stat(join(dir, f))).blocks * 512;
  return n;
}

/** B forgets every snapshot it pulled; its chunk cache stays. */
async function forgetSnapshots(): Promise<void> {
  const tags = (await Snapshot.list(on(b))).map((s) => s.tag).sort();
  for (const t of tags.reverse())
    await Snapshot.remove(t, { ...on(b), cascade: true }).catch(() => undefined);
}

const chunksOf = async (home: TestHome) =>
  (await readdir(join(home.paths.home, 'cache', 'chunks')).catch(() => [] as string[])).filter(
    (n) => !n.endsWith('.partial'),
  );

before(async () => {
  nodes = await makeNodes(await mkdtemp(join(tmpdir(), 'forkd-nodes-')));
  homeA = await makeTestHome();
  homeB = await makeTestHome();
  const env = { FORKD_INSECURE_REGISTRIES: nodes.registry };
  a = await startDaemon({ ...homeA, env: { ...homeA.env, ...env } }, [], undefined, nodes.a);
  b = await startDaemon({ ...homeB, env: { ...homeB.env, ...env } }, [], undefined, nodes.b);
  await Snapshot.create({
    ...on(a),
    tag: 'base',
    image: 'busybox',
    network: 'nat',
    warm: ['echo warmed > /data.txt'],
    start: ['i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 1; done'],
    waitFor: 'test -s /tmp/count',
  });
});

after(async () => {
  for (const s of started.splice(0)) await s.kill().catch(() => undefined);
  await b?.stop();
  await a?.stop();
  await nodes?.cleanup();
  await homeB?.cleanup();
  await homeA?.cleanup();
  await assertNoNetworkLeft([a?.pid, b?.pid].filter((p): p is number => p !== undefined));
});

test('B forks A’s pushed snapshot by reference, no pull: A’s warm state, both nodes with sandbox networking', async () => {
  const pushed = await new Forkd(on(a)).packs.push('base', ref('base'));
  assert.ok(pushed.uploaded > 3, JSON.stringify(pushed));
  // A sandbox of A's runs (its namespace and DNS proxy) while B's forks start.
  const onA = await fork1(a, 'base');
  const [one, two] = await Promise.all([fork1(b, ref('base')), fork1(b, ref('base'))]);
  assert.equal((await Snapshot.list(on(b))).length, 1, 'one pull, one snapshot installed');
  assert.equal(await sh(one, 'cat /data.txt'), 'warmed\n');
  const c1 = Number(await sh(one, 'cat /tmp/count'));
  await sleep(1500);
  assert.ok(Number(await sh(one, 'cat /tmp/count')) > c1, 'the warm counter still counts');
  for (const s of [onA, one, two])
    assert.equal((await s.network()).isolation, 'netns', 'each sandbox has its own namespace');

  const fetched = (await cacheOf()).bytesFetched;
  assert.ok(fetched > 0);
  const three = await fork1(b, ref('base'));
  assert.equal((await cacheOf()).bytesFetched, fetched, 'a later fork fetches nothing');
  for (const s of [onA, one, two, three]) await kill(s);
});

test('a branch that wrote 10 MiB: pushed and pulled within 2× of what it changed; base’s chunks shared in B’s cache', async () => {
  const kid = await fork1(a, 'base');
  await sh(kid, 'dd if=/dev/urandom of=/root/big bs=1048576 count=10 2>/dev/null; sync');
  await kid.branch({ tag: 'step' });
  await kill(kid);
  const changed = await ownBytes(homeA, 'step');
  const pushed = await new Forkd(on(a)).packs.push('step', ref('step'));
  console.log(
    `# step changed ${(changed / MIB).toFixed(1)} MiB; push uploaded ${(pushed.bytesUploaded / MIB).toFixed(1)} MiB`,
  );
  assert.ok(pushed.bytesUploaded >= 10 * MIB * 0.9, 'the 10 MiB of random data went up');
  assert.ok(pushed.bytesUploaded <= 2 * changed, `${pushed.bytesUploaded} > 2 × ${changed}`);

  const before = (await cacheOf()).bytesFetched;
  const onB = await fork1(b, ref('step'));
  const down = (await cacheOf()).bytesFetched - before;
  console.log(`# B fetched ${(down / MIB).toFixed(1)} MiB for the branch`);
  assert.ok(down >= 10 * MIB * 0.9 && down <= 2 * changed, `${down} vs changed ${changed}`);
  assert.equal(await sh(onB, 'cat /data.txt; wc -c < /root/big'), `warmed\n${10 * MIB}\n`);
  await kill(onB);

  // Both snapshots gone from B, its cache kept: the branch's chain is built from the chunks
  // base's pull and the branch's pull left, with nothing fetched.
  await forgetSnapshots();
  const s0 = await cacheOf();
  const again = await fork1(b, ref('step'));
  const s1 = await cacheOf();
  assert.equal(s1.misses, s0.misses, 'every chunk came from the cache');
  assert.ok(s1.hits - s0.hits > 5, 'base and step chunks both served by the cache');
  assert.equal(s1.bytesFetched, s0.bytesFetched);
  await kill(again);
});

test('the registry stopped mid-pull: the fork fails clearly, nothing installed; restarted, the next fork fetches only what is missing', async () => {
  await forgetSnapshots();
  await new Forkd(on(b)).packs.pruneCache({ all: true });
  assert.equal((await chunksOf(homeB)).length, 0, 'an empty cache');
  // A slow link, so the pull is surely under way when the registry goes.
  await nodes.throttleB(40);
  try {
    const forking = Snapshot.fork(ref('base'), { n: 1, ...on(b) }).then(
      (r) => r,
      (e: unknown) => e,
    );
    while ((await chunksOf(homeB)).length < 3) await sleep(50);
    await nodes.stopRegistry();
    const err = await forking;
    assert.ok(err instanceof Error, `the fork did not fail: ${JSON.stringify(err)}`);
    const code = (err as { code?: string }).code;
    assert.ok(code && code !== 'internal', `not a catalog error: ${code} ${err.message}`);
    assert.match(err.message, /broke off|registry|reach/i);
  } finally {
    await nodes.throttleB();
    await nodes.startRegistry();
  }
  assert.deepEqual(await Snapshot.list(on(b)), [], 'something was installed');
  const staging = (await readdir(homeB.paths.snapshots)).filter((n) => n.startsWith('.'));
  assert.deepEqual(staging, [], 'a staging dir was left');
  const had = (await chunksOf(homeB)).length;
  assert.ok(had >= 3, 'chunks fetched before the cut are kept');

  const s0 = await cacheOf();
  const s = await fork1(b, ref('base'));
  const s1 = await cacheOf();
  console.log(`# resumed: ${had} chunks kept, ${s1.misses - s0.misses} fetched`);
  assert.ok(s1.hits - s0.hits >= had, `resumed from ${had} chunks: ${s1.hits - s0.hits} hits`);
  assert.equal(await sh(s, 'cat /data.txt'), 'warmed\n');
  await kill(s);
});
