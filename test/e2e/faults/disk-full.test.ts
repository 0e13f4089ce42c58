/**
 * Disk full during long operations: FORKD_HOME on a small size-limited tmpfs (the kernel and
 * busybox image linked in from the set-up home), then a snapshot create whose memory file
 * does not fit, an image build whose filesystem does not fit, and an image pull (from a
 * real registry on loopback) whose 40 MiB layer does not fit. Each fails with
 * `disk_full` naming the home, leaves no snapshot or image under its name, no staging dir,
 * no QEMU and no sandbox dir, and gives the space back; afterwards a sandbox still boots.
 * Then the tmpfs is grown, a snapshot made and a sandbox forked from it that writes 32 MiB
 * of memory, and the disk filled to 8 MiB: a copy branch and a live branch each run out of
 * space mid-write, fail with `disk_full`, and leave no snapshot (listed, by name or on
 * disk), staging dir or child behind; the source runs on with its files. Filled to 1 MiB
 * (under the 4 MiB forkd keeps), a fork and a branch are refused with `disk_full` before
 * anything is made. Once space is freed the same source branches again. With 17 inodes left
 * (past that refusal) a fork of 4 runs out mid-fork: the children that fitted run, the others
 * fail with `disk_full` and leave no dir or QEMU (all-or-nothing: none left). Last, the branch
 * (32 MiB of random memory) pushed and pulled as a pack with 8 MiB free: the push fails with
 * `disk_full` (it compresses each layer in FORKD_HOME first) and publishes no tag; the pull
 * fails with `disk_full` and installs nothing; with the space back both work.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, statfs, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import { run } from '../../../src/util/exec.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';
import { makeTestHome, qemusUnder, type TestHome } from '../../helpers/home.js';
import { RegistryClient } from '../../../src/drivers/registry/index.js';
import { getImage, pullImage } from '../../../src/services/images/index.js';
import { blobDir } from '../../../src/services/images/cache.js';
import { PackManager } from '../../../src/services/packs/service.js';
import {
  layerFromDir,
  ociImage,
  push,
  startRegistry,
  type TestRegistry,
} from '../images/registry.js';

/** Room for a booted sandbox (overlay, sockets, logs), not for its ~120 MiB of written memory. */
const TMPFS_MIB = 24;
/** Grown to this for the branch and fork cases: a snapshot and a running fork of it fit. */
const ROOMY_MIB = 768;
/** What the filler leaves free for the branches: over the 4 MiB forkd keeps, under DIRTY_MIB. */
const LEFT_FREE = 8 * 1024 * 1024;
/** Memory the source writes (random, in a tmpfs of its own): what each branch must store. */
const DIRTY_MIB = 32;
/** Left for the fork: under the 4 MiB below which forkd starts nothing. */
const NEARLY_NOTHING = 1024 * 1024;

let mount: string;
let home: TestHome;
let s: TestServices | undefined;
let source: string;
let reg: TestRegistry | undefined;

before(async () => {
  mount = await mkdtemp(join(tmpdir(), 'forkd-diskfull-'));
  await run('mount', [
    '-t',
    'tmpfs',
    '-o',
    `size=${TMPFS_MIB}m,mode=0755`,
    'forkd-diskfull',
    mount,
  ]);
  home = await makeTestHome({ under: mount });
  s = await startServices(home);
  source = await mkdtemp(join(tmpdir(), 'forkd-diskfull-src-'));
  await mkdir(join(source, 'data'));
  await writeFile(join(source, 'data', 'blob.bin'), randomBytes(40 * 1024 * 1024));
  reg = await startRegistry();
});

after(async () => {
  try {
    await reg?.stop();
    await closeAndCheck(s, home);
  } finally {
    await run('umount', [mount]).catch(() => run('umount', ['-l', mount]));
    await rm(mount, { recursive: true, force: true });
    await rm(source, { recursive: true, force: true });
  }
});

const freeBytes = async () => {
  const f = await statfs(home.dir);
  return f.bavail * f.bsize;
};

/** What a failed operation must not leave: dot-staging dirs, sandbox dirs, QEMUs. */
async function assertNothingHalf(dir: string, name: string): Promise<void> {
  const entries = await readdir(dir).catch(() => [] as string[]);
  assert.deepEqual(
    entries.filter((e) => e === name || e.startsWith('.')),
    [],
    `left in ${dir}`,
  );
  assert.deepEqual(await readdir(home.paths.sandboxes).catch(() => []), [], 'a sandbox dir');
  assert.deepEqual(await qemusUnder(home.dir), [], 'a QEMU');
}

test(
  'snapshot create on a full disk: disk_full, no snapshot, space given back',
  { timeout: 300_000 },
  async () => {
    const before = await freeBytes();
    const err = await s!.snapshots
      .create({ tag: 'full', image: 'busybox', memory_mib: 256 }, caller)
      .then(
        () => assert.fail('the snapshot fitted on the small disk'),
        (e: unknown) => e,
      );
    assert.ok(isForkdError(err, 'disk_full'), `expected disk_full, got ${String(err)}`);
    assert.match(err.message, /space|full/i);
    assert.match(err.message, /free|delete|remove|larger/i);
    await assert.rejects(s!.snapshots.get('full'), (e) => isForkdError(e, 'snapshot_not_found'));
    assert.deepEqual(await s!.snapshots.list(), []);
    await assertNothingHalf(home.paths.snapshots, 'full');
    assert.ok((await freeBytes()) >= before - 1024 * 1024, 'the space was not given back');
  },
);

test(
  'image build on a full disk: disk_full (not "size too small"), no image',
  { timeout: 120_000 },
  async () => {
    const before = await freeBytes();
    const err = await s!.services.images.create({ name: 'big', from_dir: source }).then(
      () => assert.fail('the image fitted on the small disk'),
      (e: unknown) => e,
    );
    assert.ok(isForkdError(err, 'disk_full'), `expected disk_full, got ${String(err)}`);
    assert.doesNotMatch(err.message, /--size/);
    await assert.rejects(s!.services.images.get('big'), (e) => isForkdError(e, 'image_not_found'));
    await assertNothingHalf(home.paths.images, 'big');
    assert.ok((await freeBytes()) >= before - 1024 * 1024, 'the space was not given back');
  },
);

test(
  'image pull on a full disk: disk_full, no image, no temp blob, space given back',
  { timeout: 180_000 },
  async () => {
    const scratch = await mkdtemp(join(tmpdir(), 'forkd-diskfull-push-'));
    try {
      const layer = await layerFromDir(source, join(scratch, 'L'), 'none'); // 40 MiB
      await push(new RegistryClient(reg!.host), 'team/big', '1', ociImage([layer], {}), scratch);
      const before = await freeBytes();
      const err = await pullImage(home.paths, {
        reference: `${reg!.host}/team/big:1`,
        name: 'pulled',
      }).then(
        () => assert.fail('the image fitted on the small disk'),
        (e: unknown) => e,
      );
      assert.ok(isForkdError(err, 'disk_full'), `expected disk_full, got ${String(err)}`);
      await assert.rejects(getImage(home.paths, 'pulled'), (e) =>
        isForkdError(e, 'image_not_found'),
      );
      await assertNothingHalf(home.paths.images, 'pulled');
      const blobs = await readdir(blobDir(home.paths)).catch(() => [] as string[]);
      assert.deepEqual(
        blobs.filter((n) => n.startsWith('.') || n.endsWith('.partial')),
        [],
        'a temp blob was left',
      );
      assert.ok((await freeBytes()) >= before - 1024 * 1024, 'the space was not given back');
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  },
);

test(
  'create on a full disk: refused with disk_full, no row, no dir, no QEMU; with space the same home boots one',
  { timeout: 120_000 },
  async () => {
    const rows = (await s!.sandboxes.list({})).length;
    const filler = await fillDisk('create-filler', NEARLY_NOTHING);
    try {
      const err = await failure(s!.sandboxes.create({ image: 'busybox' }, caller), 'a create');
      isRefused(err, 'create');
      assert.match((err as Error).message, /create from busybox/);
      assert.equal((await s!.sandboxes.list({})).length, rows, 'a sandbox row was left');
      await assertNothingHalf(home.paths.sandboxes, '');
    } finally {
      await rm(filler, { force: true });
    }
    const sbx = await s!.sandboxes.create({ image: 'busybox' }, caller);
    assert.equal(await sh(s!, sbx.id, 'echo ok'), 'ok\n');
    await s!.sandboxes.kill(sbx.id);
  },
);

/** Fill the home's filesystem until `leave` bytes are left; returns the filler's path. */
async function fillDisk(name = 'filler', leave = LEFT_FREE): Promise<string> {
  const filler = join(mount, name);
  const extra = (await freeBytes()) - leave;
  if (extra > 0) await run('fallocate', ['-l', String(extra), filler]);
  return filler;
}

/** The error an operation failed with; fails the test if it succeeded. */
const failure = (p: Promise<unknown>, what: string) =>
  p.then(
    () => assert.fail(`${what} fitted on the full disk`),
    (e: unknown) => e,
  );

test(
  'branch (copy and live) and fork on a full disk: disk_full, nothing half-written, the source runs on',
  { timeout: 600_000 },
  async () => {
    await run('mount', ['-o', `remount,size=${ROOMY_MIB}m`, mount]);
    await s!.snapshots.create({ tag: 'roomy', image: 'busybox', memory_mib: 128 }, caller);
    const [src] = (await s!.snapshots.fork({ snapshot: 'roomy', n: 1 }, caller)).sandboxes;
    assert.ok(src);
    await sh(
      s!,
      src.id,
      'echo kept > /root/kept && mkdir -p /mnt/dirty && mount -t tmpfs -o size=48m dirty /mnt/dirty && ' +
        `dd if=/dev/urandom of=/mnt/dirty/pages bs=1M count=${DIRTY_MIB} 2>/dev/null`,
    );
    const fillers = [await fillDisk()];
    try {
      for (const mode of ['copy', 'live'] as const) {
        const err = await failure(
          s!.branch.branch(src.id, { tag: `full-${mode}`, mode }, caller),
          `a ${mode} branch`,
        );
        assert.ok(
          isForkdError(err, 'disk_full'),
          `${mode}: expected disk_full, got ${String(err)}`,
        );
        assert.match(err.message, /ran out of disk space/, 'failed mid-write, not refused');
        await assertNoSnapshot(`full-${mode}`);
        assert.equal((await s!.sandboxes.get(src.id)).state, 'running');
        assert.equal(await sh(s!, src.id, 'cat /root/kept'), 'kept\n');
      }
      // Nearly nothing left: a child would start (it needs under a MiB) and stall on its
      // first disk write, so a fork is refused before anything is made; so is a branch.
      fillers.push(await fillDisk('filler-2', NEARLY_NOTHING));
      const listed = (await s!.sandboxes.list({})).length;
      await assert.rejects(s!.snapshots.fork({ snapshot: 'roomy', n: 1 }, caller), (e) =>
        isRefused(e, 'fork'),
      );
      await assert.rejects(
        s!.branch.branch(src.id, { tag: 'full-refused', mode: 'copy' }, caller),
        (e) => isRefused(e, 'branch'),
      );
      await assertNoSnapshot('full-refused');
      assert.equal((await s!.sandboxes.list({})).length, listed, 'a child was listed');
      assert.deepEqual(await readdir(home.paths.sandboxes), [src.id], 'a child dir was left');
      assert.equal((await qemusUnder(home.dir)).length, 1, 'a child QEMU was left');
    } finally {
      for (const f of fillers) await rm(f, { force: true });
    }
    // The disk switch was undone: the same source branches again once there is room.
    const again = await s!.branch.branch(src.id, { tag: 'after-full', mode: 'live' }, caller);
    assert.equal(again.snapshot.tag, 'after-full');
    assert.equal(await sh(s!, src.id, 'cat /root/kept'), 'kept\n');
    await s!.sandboxes.kill(src.id); // after-full and roomy stay for the pack case
  },
);

test(
  'fork of 4 with 17 inodes left (past the refusal): children that fit run, the rest fail disk_full, nothing half-made',
  { timeout: 300_000 },
  async (t) => {
    // Out of inodes is ENOSPC too, and lands at an exact point: a child makes a handful of
    // files (its dir, owner file, overlay, sockets, logs), so four of them cannot all fit in
    // 17 (forkd refuses to start a fork under 16).
    const f = await statfs(mount);
    await run('mount', ['-o', `remount,nr_inodes=${f.files - f.ffree + 17}`, mount]);
    try {
      const r = await s!.snapshots.fork({ snapshot: 'roomy', n: 4 }, caller);
      assert.ok(r.failed.length > 0, 'all four children fitted in 17 inodes');
      assertDiskFull(r.failed);
      const kids = r.sandboxes.map((x) => x.id);
      t.diagnostic(`${kids.length} children ran, ${r.failed.length} failed`);
      for (const id of kids) assert.equal(await sh(s!, id, 'echo ok'), 'ok\n');
      assert.deepEqual((await readdir(home.paths.sandboxes)).sort(), [...kids].sort());
      assert.equal((await qemusUnder(home.dir)).length, kids.length, "a failed child's QEMU");
      for (const id of kids) await s!.sandboxes.kill(id);

      // All or nothing: the failures answered, no child kept (or refused up front, if what
      // the killed children left keeps the inodes under 16).
      const aon = await s!.snapshots
        .fork({ snapshot: 'roomy', n: 4, all_or_nothing: true }, caller)
        .catch((e: unknown) => e);
      t.diagnostic(
        isForkdError(aon) ? `all or nothing: ${aon.message}` : 'all or nothing: answered',
      );
      if (isForkdError(aon)) assert.equal(aon.code, 'disk_full', aon.message);
      else {
        const o = aon as typeof r;
        assert.deepEqual(o.sandboxes, [], 'an all-or-nothing fork kept a child');
        assert.ok(o.failed.length > 0, 'all four children fitted in 17 inodes');
        assertDiskFull(o.failed);
      }
      assert.deepEqual(await readdir(home.paths.sandboxes), [], 'a child dir was left');
      assert.deepEqual(await qemusUnder(home.dir), [], 'a child QEMU was left');
    } finally {
      await run('mount', ['-o', `remount,nr_inodes=${f.files}`, mount]);
    }
  },
);

test(
  'pack push and pull on a full disk: disk_full, nothing pushed or installed; with space both work',
  { timeout: 300_000 },
  async () => {
    const packs = s!.services.packs as PackManager;
    const ref = `${reg!.host}/team/env:after-full`;
    const packCache = join(home.paths.home, 'cache', 'packs');
    const noWorkDirs = async () =>
      assert.deepEqual(
        (await readdir(packCache).catch(() => [] as string[])).filter((n) => n.startsWith('work')),
        [],
        'a push work dir was left',
      );
    // after-full holds the source's 32 MiB of random memory: its layer cannot fit in 8 MiB.
    let filler = await fillDisk();
    try {
      const err = await failure(
        packs.push('after-full', ref, undefined, undefined, { format: 'files' }),
        'a push',
      );
      assert.ok(isForkdError(err, 'disk_full'), `push: expected disk_full, got ${String(err)}`);
      await noWorkDirs();
      await assert.rejects(new RegistryClient(reg!.host).getManifest('team/env', 'after-full'));
    } finally {
      await rm(filler, { force: true });
    }
    const pushed = await packs.push('after-full', ref, undefined, undefined, { format: 'files' });
    assert.ok(pushed.uploaded > 0, JSON.stringify(pushed));
    await noWorkDirs();

    await s!.snapshots.remove('roomy', { cascade: true });
    filler = await fillDisk();
    try {
      const err = await failure(packs.pull({ reference: ref }), 'a pull');
      assert.ok(isForkdError(err, 'disk_full'), `pull: expected disk_full, got ${String(err)}`);
      assert.match(err.message, /pull of .* ran out of disk space/);
      assert.deepEqual(await s!.snapshots.list(), [], 'something was installed');
      assert.deepEqual(await readdir(home.paths.snapshots), [], 'a staging dir was left');
    } finally {
      await rm(filler, { force: true });
    }
    const pulled = await packs.pull({ reference: ref });
    assert.deepEqual(pulled.installed, ['roomy', 'after-full']);
    assert.deepEqual((await s!.snapshots.verify('after-full')).problems, []);
    await s!.snapshots.remove('roomy', { cascade: true });
  },
);

/** Every failed child of a fork failed with `disk_full`. */
function assertDiskFull(failed: { error: unknown }[]): void {
  for (const x of failed) {
    assert.ok(isForkdError(x.error, 'disk_full'), `expected disk_full, got ${String(x.error)}`);
  }
}

/** A failed branch left nothing under `tag`: not by name, not listed, not on disk. */
async function assertNoSnapshot(tag: string): Promise<void> {
  await assert.rejects(s!.snapshots.get(tag), (e) => isForkdError(e, 'snapshot_not_found'));
  assert.deepEqual(
    (await s!.snapshots.list()).map((x) => x.tag),
    ['roomy'],
    `${tag}: listed`,
  );
  assert.deepEqual(await readdir(home.paths.snapshots), ['roomy'], `${tag}: left in snapshots/`);
}

/** `disk_full` before anything was made, saying what is free and what to do. */
function isRefused(e: unknown, what: string): boolean {
  assert.ok(isForkdError(e, 'disk_full'), `${what}: expected disk_full, got ${String(e)}`);
  assert.match(e.message, /refused.*MiB.*free.*retry/, what);
  return true;
}
