/**
 * Snapshots that travel as chunks, end to end (real VMs under TCG, Debian's
 * `docker-registry` on loopback): two nodes, A and B, each the daemon's services over its
 * own FORKD_HOME in this process (loopback; nodes.test.ts has two daemon processes).
 * A makes a warm snapshot and pushes it; B forks it by reference with no pull (two forks at
 * once share one pull) and its child has A's warm state; A branches a child that wrote
 * 10 MiB and pushes the branch: uploaded and downloaded bytes stay within 2× of what the
 * branch changed; B's cache serves base's chunks to the branch's pull. A pull cut off
 * mid-way fails clearly and the next resumes from the chunks it has; a corrupt chunk is
 * refused by digest with nothing installed; eviction under a small limit keeps the
 * snapshot a running sandbox uses.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import type { PackManager } from '../../../src/services/packs/service.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';
import { cuttingProxy } from '../images/cutting-proxy.js';
import { startRegistry, type TestRegistry } from '../images/registry.js';

let homeA: TestHome;
let homeB: TestHome;
let a: TestServices;
let b: TestServices;
let reg: TestRegistry;
const packsOf = (s: TestServices) => s.services.packs as PackManager;
const MIB = 1048576;

async function fork1(s: TestServices, snapshot: string): Promise<string> {
  const r = await s.snapshots.fork({ snapshot, n: 1 }, caller);
  assert.equal(r.failed.length, 0, JSON.stringify(r.failed));
  return (r.sandboxes[0] as { id: string }).id;
}

/** Bytes on disk of a snapshot's own files (what it changed over its parent). */
async function ownBytes(s: TestServices, home: TestHome, tag: string): Promise<number> {
  const info = await s.snapshots.get(tag);
  let n = 0;
  for (const f of info.files)
    n += (await stat(join(home.paths.snapshots, tag, f.name))).blocks * 512;
  return n;
}

const tagsOf = async (s: TestServices) => (await s.snapshots.list()).map((x) => x.tag).sort();

async function noStaging(home: TestHome): Promise<void> {
  const left = (await readdir(home.paths.snapshots)).filter((n) => n.startsWith('.'));
  assert.deepEqual(left, [], 'a staging dir was left');
}

/** Remove every snapshot B pulled, leaving its chunk cache as it is. */
async function forgetSnapshots(): Promise<void> {
  for (const t of (await tagsOf(b)).reverse())
    await b.snapshots.remove(t, { cascade: true }).catch(() => undefined);
  await writeFile(join(homeB.paths.home, 'cache', 'refs.json'), '{}');
}

before(async () => {
  homeA = await makeTestHome();
  homeB = await makeTestHome();
  a = await startServices(homeA, { branchMode: 'copy' });
  b = await startServices(homeB, { branchMode: 'copy' });
  reg = await startRegistry();
  await a.snapshots.create(
    {
      tag: 'base',
      image: 'busybox',
      // No NIC: not what this file tests (nodes.test.ts runs two daemons with one each).
      network: 'none',
      warm: ['echo warmed > /data.txt'],
      start: ['i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 1; done'],
      wait_for: 'test -s /tmp/count',
    },
    caller,
  );
});

after(async () => {
  await reg?.stop();
  await closeAndCheck(b, homeB);
  await closeAndCheck(a, homeA);
});

let baseRef: string;
let stepRef: string;

test('B forks A’s pushed snapshot by reference: one pull for two forks, A’s warm state, later forks local', async () => {
  const pushed = await packsOf(a).push('base', `${reg.host}/team/env:base`);
  assert.ok(pushed.uploaded > 3, JSON.stringify(pushed));
  baseRef = `${reg.host}/team/env:base`;

  const [one, two] = await Promise.all([
    b.snapshots.fork({ snapshot: baseRef, n: 1 }, caller),
    b.snapshots.fork({ snapshot: baseRef, n: 1 }, caller),
  ]);
  const ids = [...one.sandboxes, ...two.sandboxes].map((x) => x.id);
  assert.equal(ids.length, 2, JSON.stringify([one.failed, two.failed]));
  const cached = Object.values(
    JSON.parse(await readFile(join(homeB.paths.home, 'cache', 'refs.json'), 'utf8')),
  );
  assert.equal(cached.length, 1, 'one pull, recorded once');
  assert.equal((await tagsOf(b)).length, 1, 'one snapshot installed');
  assert.equal(await sh(b, ids[0]!, 'cat /data.txt'), 'warmed\n');
  const c1 = Number(await sh(b, ids[0]!, 'cat /tmp/count'));
  await new Promise((r) => setTimeout(r, 1500));
  assert.ok(Number(await sh(b, ids[0]!, 'cat /tmp/count')) > c1, 'the warm counter still counts');

  const fetched = packsOf(b).cache.stats.bytes_fetched;
  const t0 = performance.now();
  ids.push(await fork1(b, baseRef));
  console.log(`# a later fork by reference: ${(performance.now() - t0).toFixed(0)} ms`);
  assert.equal(packsOf(b).cache.stats.bytes_fetched, fetched, 'a later fork fetches nothing');
  for (const id of ids) await b.sandboxes.kill(id);
});

test('a branch that wrote 10 MiB: pushed and pulled within 2× of what it changed; base chunks shared', async () => {
  const kid = await fork1(a, 'base');
  await sh(a, kid, 'dd if=/dev/urandom of=/root/big bs=1048576 count=10 2>/dev/null; sync');
  await a.branch.branch(kid, { tag: 'step' }, caller);
  await a.sandboxes.kill(kid);
  const changed = await ownBytes(a, homeA, 'step');
  stepRef = `${reg.host}/team/env:step`;
  const pushed = await packsOf(a).push('step', stepRef);
  console.log(
    `# step changed ${(changed / MIB).toFixed(1)} MiB; push uploaded ${(pushed.bytes_uploaded / MIB).toFixed(1)} MiB`,
  );
  assert.ok(pushed.bytes_uploaded >= 10 * MIB * 0.9, 'the 10 MiB of random data went up');
  assert.ok(pushed.bytes_uploaded <= 2 * changed, `${pushed.bytes_uploaded} > 2 × ${changed}`);

  const before = packsOf(b).cache.stats.bytes_fetched;
  const id = await fork1(b, stepRef);
  const down = packsOf(b).cache.stats.bytes_fetched - before;
  console.log(`# B fetched ${(down / MIB).toFixed(1)} MiB for the branch`);
  assert.ok(down >= 10 * MIB * 0.9 && down <= 2 * changed, `${down} vs changed ${changed}`);
  assert.equal(await sh(b, id, 'cat /data.txt; wc -c < /root/big'), `warmed\n${10 * MIB}\n`);
  await b.sandboxes.kill(id);

  // Both snapshots gone from B, its cache kept: the branch's pull takes base's chunks from
  // the cache (where base's own pull left them) and fetches only the branch's.
  await forgetSnapshots();
  const s0 = { ...packsOf(b).cache.stats };
  const again = await fork1(b, stepRef);
  const s1 = packsOf(b).cache.stats;
  assert.equal(s1.misses, s0.misses, 'every chunk came from the cache');
  assert.ok(s1.hits - s0.hits > 5, 'base and step chunks both served by the cache');
  assert.equal(s1.bytes_fetched, s0.bytes_fetched);
  await b.sandboxes.kill(again);
});

test('a pull cut off mid-way fails clearly, installs nothing; the next resumes with only missing chunks', async () => {
  await forgetSnapshots();
  await packsOf(b).references.trim(0); // an empty cache
  const before = await tagsOf(b);
  const proxy = await cuttingProxy(reg.host, 4 * MIB, 'cut');
  const viaProxy = `${proxy.host}/team/env:step`;
  const err = await b.snapshots
    .fork({ snapshot: viaProxy, n: 1 }, caller)
    .then(
      () => assert.fail('the fork succeeded through a cutting proxy'),
      (e: unknown) => e,
    )
    .finally(() => proxy.close());
  assert.ok(proxy.cuts() > 0, 'the proxy never cut');
  assert.ok(isForkdError(err) && err.code !== 'internal', `not a catalog error: ${String(err)}`);
  assert.match(err.message, /broke off|registry|reach/i);
  assert.deepEqual(await tagsOf(b), before, 'something was installed');
  await noStaging(homeB);
  const had = (await readdir(packsOf(b).cache.dir)).filter((n) => !n.endsWith('.partial')).length;
  assert.ok(had > 0, 'chunks fetched before the cut are kept');

  const s0 = { ...packsOf(b).cache.stats };
  const id = await fork1(b, stepRef);
  const s1 = packsOf(b).cache.stats;
  assert.ok(s1.hits - s0.hits >= had, `resumed from ${had} chunks: ${s1.hits - s0.hits} hits`);
  assert.equal(await sh(b, id, 'wc -c < /root/big'), `${10 * MIB}\n`);
  await b.sandboxes.kill(id);
});

test('a corrupt chunk in the registry is refused by its digest; nothing is installed', async () => {
  await forgetSnapshots();
  await packsOf(b).references.trim(0);
  // The biggest blob of the registry is one of step's random chunks: overwrite its bytes.
  const root = join(reg.dataDir, 'docker', 'registry', 'v2', 'blobs', 'sha256');
  let worst = { path: '', size: 0, hex: '' };
  for (const x of await readdir(root)) {
    for (const hex of await readdir(join(root, x))) {
      const path = join(root, x, hex, 'data');
      const size = (await stat(path)).size;
      if (size > worst.size) worst = { path, size, hex };
    }
  }
  const good = await readFile(worst.path);
  await writeFile(worst.path, Buffer.alloc(good.length, 7));
  try {
    const before = await tagsOf(b);
    await assert.rejects(
      b.snapshots.fork({ snapshot: stepRef, n: 1 }, caller),
      (e: unknown) => isForkdError(e) && e.code === 'blob_invalid' && e.message.includes(worst.hex),
    );
    assert.deepEqual(await tagsOf(b), before, 'nothing installed');
    await noStaging(homeB);
  } finally {
    await writeFile(worst.path, good);
  }
});

test('eviction under a small limit keeps what a running sandbox uses', async () => {
  await forgetSnapshots();
  const running = await fork1(b, stepRef);
  const other = await fork1(b, baseRef);
  await b.sandboxes.kill(other); // base's cached snapshot: in use by step's chain only
  const r = await packsOf(b).references.trim(1);
  assert.ok(
    r.removed.some((e) => e.kind === 'chunk'),
    'chunks were evicted',
  );
  const tags = await tagsOf(b);
  const info = await b.sandboxes.get(running);
  assert.ok(
    tags.includes(info.snapshot as string),
    `${info.snapshot} evicted under a running sandbox`,
  );
  assert.equal(await sh(b, running, 'cat /data.txt'), 'warmed\n');
  await b.sandboxes.kill(running);
  const all = await packsOf(b).references.trim(0);
  assert.ok(
    all.removed.some((e) => e.kind === 'snapshot'),
    'unused, it goes',
  );
  await forgetSnapshots();
});
