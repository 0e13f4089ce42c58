/**
 * Portable snapshots end to end (real VMs under TCG, a real `docker-registry` on loopback):
 * a chain (a snapshot, a branch of a fork of it, a branch of a fork of that) packed,
 * removed, unpacked and forked — the children see the warm file, the inherited counter
 * process and their own identity; memory stays sparse. Pushed then a branch pushed: the
 * second push uploads only the branch's blobs (counted in the registry's storage); removed
 * and pulled back by the branch alone (its parent comes along); a pull the registry cuts
 * off mid-blob fails with a clear error, installs nothing, and the next one resumes. Refusals — corrupt file, missing parent, format version, another host — leave
 * nothing installed. One snapshot chain is shared by the whole file.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile, truncate } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import { PackManager } from '../../../src/services/packs/service.js';
import { run } from '../../../src/util/exec.js';
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

/** Pack format 1 (one blob per file): the blob counts below are about it; chunks.test has format 2. */
const WHOLE_FILES = { format: 'files' } as const;

let home: TestHome;
let s: TestServices;
let reg: TestRegistry;
let scratch: string;
const packs = () => s.services.packs as PackManager;

/** Every blob the registry stores. */
async function storedBlobs(): Promise<Set<string>> {
  const dir = join(reg.dataDir, 'docker', 'registry', 'v2', 'blobs', 'sha256');
  const out = new Set<string>();
  for (const a of await readdir(dir).catch(() => [] as string[])) {
    for (const b of await readdir(join(dir, a))) out.add(b);
  }
  return out;
}

async function fork1(tag: string): Promise<string> {
  const r = await s.snapshots.fork({ snapshot: tag, n: 1 }, caller);
  assert.equal(r.failed.length, 0, JSON.stringify(r.failed));
  return (r.sandboxes[0] as { id: string }).id;
}

/** Branch a fork of `from` after `script`, into `tag`. */
async function branchOf(from: string, tag: string, script: string): Promise<void> {
  const id = await fork1(from);
  await sh(s, id, script);
  await s.branch.branch(id, { tag }, caller);
  await s.sandboxes.kill(id);
}

/** The pack of b2 the first test makes; later tests reuse it. */
const packOfB2 = () => join(scratch, 'b2.forkd.tar.zst');

const tags = async () => (await s.snapshots.list()).map((x) => x.tag).sort();

async function refused(f: () => Promise<unknown>, code: string, message: RegExp): Promise<void> {
  const before = await tags();
  await assert.rejects(
    f(),
    (e: unknown) => isForkdError(e) && e.code === code && message.test(e.message),
  );
  assert.deepEqual(await tags(), before, 'nothing installed');
  const staging = (await readdir(home.paths.snapshots)).filter((n) => n.startsWith('.'));
  assert.deepEqual(staging, [], 'no staging left');
}

before(async () => {
  home = await makeTestHome();
  s = await startServices(home, { branchMode: 'copy' });
  reg = await startRegistry();
  scratch = await mkdtemp(join(tmpdir(), 'forkd-packs-'));
  await s.snapshots.create(
    {
      tag: 'base',
      image: 'busybox',
      warm: ['echo warmed > /data.txt'],
      start: ['i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 1; done'],
      wait_for: 'test -s /tmp/count',
    },
    caller,
  );
  await branchOf('base', 'b1', 'echo one > /root/1; sync');
  await branchOf('b1', 'b2', 'echo two > /root/2; sync');
});

after(async () => {
  await reg?.stop();
  await rm(scratch, { recursive: true, force: true });
  await closeAndCheck(s, home);
});

test('pack → remove → unpack → fork: a branch of a branch round-trips with its parents, sparse', async () => {
  const file = packOfB2();
  const packed = await packs().pack('b2', file);
  assert.deepEqual(packed.chain, ['base', 'b1', 'b2']);
  assert.equal(packed.bytes, (await stat(file)).size);
  assert.ok(packed.bytes < packed.logical_bytes / 4, `${packed.bytes} of ${packed.logical_bytes}`);

  await s.snapshots.remove('base', { cascade: true });
  const done = await packs().unpack(file);
  assert.deepEqual(done.installed, ['base', 'b1', 'b2']);
  const info = await s.snapshots.get('b2');
  assert.equal(info.bootable, true);
  assert.equal(info.origin?.kind, 'pack');
  assert.deepEqual((await s.snapshots.verify('b2')).problems, []);
  const mem = await stat(join(home.paths.snapshots, 'base', 'memory'));
  const recorded = (await s.snapshots.get('base')).files.find((f) => f.name === 'memory');
  const onDisk = mem.blocks * 512;
  assert.ok(onDisk < mem.size && onDisk <= (recorded?.allocated ?? 0) * 1.05, `sparse: ${onDisk}`);

  const [a, b] = [await fork1('b2'), await fork1('b2')];
  assert.equal(await sh(s, a, 'cat /data.txt /root/1 /root/2'), 'warmed\none\ntwo\n');
  const c1 = Number(await sh(s, a, 'cat /tmp/count'));
  await new Promise((r) => setTimeout(r, 1500));
  assert.ok(Number(await sh(s, a, 'cat /tmp/count')) > c1, 'the inherited counter still counts');
  assert.notEqual(await sh(s, a, 'hostname'), await sh(s, b, 'hostname'));
  for (const id of [a, b]) await s.sandboxes.kill(id);

  // An existing tag is never overwritten without --force.
  await refused(async () => packs().unpack(file), 'name_taken', /already exists/);
});

test('a corrupt file, a missing parent, another format or another host are refused; nothing installed', async () => {
  // The first test's pack of b2 (b1's vmstate and base are in it too): packing again would
  // hash and compress the whole chain and the image once more for the same refusals.
  const file = packOfB2();
  const x = join(scratch, 'x');
  await mkdir(x);
  await run('tar', ['-I', 'zstd -q', '-xSf', file, '-C', x]);
  const repack = async (name: string) => {
    const out = join(scratch, name);
    const members = ['forkd-pack.json', ...(await listFiles(x))];
    await run('tar', ['--sparse', '-I', 'zstd -q', '-C', x, '-cf', out, ...members]);
    return out;
  };
  const manifest = JSON.parse(await readFile(join(x, 'forkd-pack.json'), 'utf8'));
  await s.snapshots.remove('base', { cascade: true });

  await writeFile(join(x, 'snapshots/b1/vmstate'), 'not the device state');
  await refused(
    async () => packs().unpack(await repack('corrupt.tar.zst')),
    'blob_invalid',
    /vmstate .*corrupt/,
  );
  await run('tar', ['-I', 'zstd -q', '-xSf', file, '-C', x, 'snapshots/b1/vmstate']);

  await rm(join(x, 'snapshots/base'), { recursive: true });
  const noParent = {
    ...manifest,
    files: manifest.files.filter((f: { path: string }) => !f.path.startsWith('snapshots/base/')),
  };
  await writeFile(join(x, 'forkd-pack.json'), JSON.stringify(noParent));
  await refused(
    async () => packs().unpack(await repack('orphan.tar.zst')),
    'pack_invalid',
    /lacks snapshot "base"/,
  );

  await writeFile(join(x, 'forkd-pack.json'), JSON.stringify({ ...manifest, format_version: 9 }));
  await refused(
    async () => packs().unpack(await repack('v9.tar.zst')),
    'pack_invalid',
    /pack format 9/,
  );

  const elsewhere = new PackManager({
    paths: home.paths,
    snapshots: s.snapshots,
    qemuVersion: async () => '99.1.0',
  });
  await refused(
    async () => elsewhere.unpack(file),
    'pack_incompatible',
    /QEMU test .* QEMU 99\.1\.0/,
  );
  await refused(
    async () => packs().unpack(join(scratch, 'forkd-pack-none')),
    'bad_request',
    /no pack file/,
  );

  await packs().unpack(file); // the good one still installs
});

async function listFiles(root: string): Promise<string[]> {
  const out: string[] = [];
  for (const top of ['snapshots', 'images']) {
    for (const d of await readdir(join(root, top)).catch(() => [] as string[])) {
      for (const f of await readdir(join(root, top, d))) out.push(`${top}/${d}/${f}`);
    }
  }
  return out;
}

test('push, push a branch (only its blobs), pull the branch alone: parents come, forks see branch time', async () => {
  const first = await packs().push(
    'base',
    `${reg.host}/team/env:base`,
    undefined,
    undefined,
    WHOLE_FILES,
  );
  assert.equal(first.skipped, 0);
  const afterFirst = await storedBlobs();
  const second = await packs().push(
    'b1',
    `${reg.host}/team/env:b1`,
    undefined,
    undefined,
    WHOLE_FILES,
  );
  const added = [...(await storedBlobs())].filter((b) => !afterFirst.has(b));
  // b1's own files (manifest, memory.diff, vmstate, disk) and a config: base's were skipped.
  assert.equal(second.uploaded, 5, JSON.stringify(second));
  assert.equal(added.length, 5 + 1, 'five blobs and one manifest are new in the registry');
  assert.ok(second.skipped >= 6, JSON.stringify(second));
  assert.ok(second.bytes_uploaded < first.bytes_uploaded / 2);
  // Another repository of the registry: cross-mounted, nothing uploaded.
  const other = await packs().push(
    'b1',
    `${reg.host}/other/env:b1`,
    undefined,
    undefined,
    WHOLE_FILES,
  );
  assert.ok(other.uploaded <= 1, JSON.stringify(other)); // its config (the pack manifest) only
  assert.ok(other.mounted >= 9, JSON.stringify(other));

  await s.snapshots.remove('base', { cascade: true });
  const pulled = await packs().pull({ reference: `${reg.host}/team/env:b1` });
  assert.deepEqual(pulled.installed, ['base', 'b1']);
  const info = await s.snapshots.get('b1');
  assert.equal(info.origin?.kind, 'registry');
  assert.equal(info.origin?.digest, second.digest);
  const kid = await fork1('b1');
  assert.equal(
    await sh(s, kid, 'cat /data.txt /root/1; test ! -e /root/2 && echo no2'),
    'warmed\none\nno2\n',
  );
  await s.sandboxes.kill(kid);
});

test('a registry cutting the pull mid-blob: a clear error, nothing installed; the next pull resumes', async () => {
  await s.snapshots.remove('b1', {});
  const before = await tags();
  // Cut every connection once 256 KiB came back: b1's memory diff is larger than that.
  const proxy = await cuttingProxy(reg.host, 256 * 1024, 'cut');
  const err = await packs()
    .pull({ reference: `${proxy.host}/team/env:b1` })
    .then(
      () => assert.fail('the pull succeeded through a cutting proxy'),
      (e: unknown) => e,
    )
    .finally(() => proxy.close());
  assert.ok(proxy.cuts() > 0, 'the proxy never cut');
  assert.ok(isForkdError(err) && err.code !== 'internal', `not a catalog error: ${String(err)}`);
  assert.match(err.message, /broke off|connection|registry/i);
  assert.deepEqual(await tags(), before, 'something was installed');
  const left = (await readdir(home.paths.snapshots)).filter((n) => n.startsWith('.'));
  assert.deepEqual(left, [], 'a staging dir was left');
  const blobs = join(home.paths.home, 'cache', 'packs', 'blobs');
  const partials = (await readdir(blobs)).filter((n) => n.endsWith('.partial'));
  assert.equal(partials.length, 1, 'the broken-off blob is kept to resume');
  const pulled = await packs().pull({ reference: `${reg.host}/team/env:b1` });
  assert.ok(pulled.bytes_resumed > 0, JSON.stringify(pulled));
  assert.deepEqual(pulled.reused, ['base']);
  assert.deepEqual(
    (await readdir(blobs)).filter((n) => n.endsWith('.partial')),
    [],
  );
  await truncate(packOfB2(), 1000); // a truncated pack: refused, not installed
  await refused(async () => packs().unpack(packOfB2(), { tag: 'cut' }), 'pack_invalid', /./);
  await s.snapshots.remove('base', { cascade: true });
});
