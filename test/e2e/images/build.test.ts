/**
 * Building images from a directory with the real mkfs.ext4, checked from the outside with
 * debugfs and e2fsck: contents, modes, symlinks, image.json, staging, name rules.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import {
  chmod,
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  rm,
  symlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { isForkdError } from '../../../src/errors.js';
import {
  buildImageFromDir,
  getImage,
  listImages,
  removeImage,
  validateImageName,
} from '../../../src/services/images/index.js';
import { removeTree } from '../../../src/services/images/store.js';
import { run } from '../../../src/util/exec.js';
import { ext4Check, ext4Read, ext4Stat, imagesDirEntries, tempHome } from './fixtures.js';

const BINARY = randomBytes(300_000);

/** A tree with nesting, a symlink, an executable, a private file and binary content. */
async function sourceTree(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-tree-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await mkdir(join(dir, 'a/b/c'), { recursive: true });
  await writeFile(join(dir, 'a/b/c/deep.txt'), 'deep\n');
  await writeFile(join(dir, 'run.sh'), '#!/bin/sh\necho hi\n');
  await chmod(join(dir, 'run.sh'), 0o755);
  await writeFile(join(dir, 'secret'), 'x');
  await chmod(join(dir, 'secret'), 0o600);
  await writeFile(join(dir, 'blob.bin'), BINARY);
  await symlink('a/b/c/deep.txt', join(dir, 'link'));
  return dir;
}

test('build from a dir: contents, modes, symlink, image.json, no staging left', async (t) => {
  const p = await tempHome(t);
  const dir = await sourceTree(t);
  const lines: string[] = [];
  const image = await buildImageFromDir(p, { name: 'tree', dir }, (l) => lines.push(l));

  assert.ok(lines.length > 0, 'progress reported');
  assert.deepEqual(await imagesDirEntries(p), ['tree']);
  await ext4Check(image.path);
  assert.equal((await ext4Read(image.path, '/a/b/c/deep.txt')).toString(), 'deep\n');
  assert.ok((await ext4Read(image.path, '/blob.bin')).equals(BINARY), 'binary content intact');
  assert.equal((await ext4Stat(image.path, '/run.sh')).mode, 0o755);
  assert.equal((await ext4Stat(image.path, '/secret')).mode, 0o600);
  const link = await ext4Stat(image.path, '/link');
  assert.equal(link.type, 'symlink');
  assert.equal(link.target, 'a/b/c/deep.txt');
  assert.equal((await ext4Stat(image.path, '/')).uid, 0);

  const manifest = JSON.parse(await readFile(join(p.images, 'tree', 'image.json'), 'utf8'));
  assert.equal(manifest.name, 'tree');
  assert.equal(manifest.format, 'ext4');
  assert.equal(manifest.size_bytes, 256 * 1024 * 1024);
  assert.ok(manifest.disk_bytes > 0 && manifest.disk_bytes < manifest.size_bytes, 'sparse');
  assert.ok(!Number.isNaN(Date.parse(manifest.created_at)));
  assert.deepEqual(manifest.source, { kind: 'dir', dir });
  assert.equal(manifest.path, undefined, 'the host path is derived, not stored');
  assert.deepEqual(await getImage(p, 'tree'), image);
  assert.deepEqual(await listImages(p), [image]);
});

test('an explicit size is honoured; one too small is bad_request and leaves nothing', async (t) => {
  const p = await tempHome(t);
  const dir = await sourceTree(t);
  const image = await buildImageFromDir(p, { name: 'big', dir, sizeMiB: 512 });
  assert.equal(image.size_bytes, 512 * 1024 * 1024);
  await writeFile(join(dir, 'huge'), randomBytes(24 * 1024 * 1024));
  await assert.rejects(buildImageFromDir(p, { name: 'small', dir, sizeMiB: 16 }), (e) =>
    isForkdError(e, 'bad_request'),
  );
  assert.deepEqual(await imagesDirEntries(p), ['big']);
});

test('rebuilding a name is name_taken unless forced; force replaces it', async (t) => {
  const p = await tempHome(t);
  const dir = await sourceTree(t);
  await buildImageFromDir(p, { name: 'one', dir });
  await assert.rejects(buildImageFromDir(p, { name: 'one', dir }), (e) =>
    isForkdError(e, 'name_taken'),
  );
  await writeFile(join(dir, 'new.txt'), 'second build\n');
  const again = await buildImageFromDir(p, { name: 'one', dir, force: true });
  assert.equal((await ext4Read(again.path, '/new.txt')).toString(), 'second build\n');
  assert.deepEqual(await imagesDirEntries(p), ['one']);
});

test('bad names are bad_request and create nothing', async (t) => {
  const p = await tempHome(t);
  const dir = await sourceTree(t);
  for (const name of ['../x', 'a/b', '', 'x'.repeat(100), 'a\0b', 'Upper', '.hidden', '-x']) {
    assert.throws(
      () => validateImageName(name),
      (e) => isForkdError(e, 'bad_request'),
      name,
    );
    await assert.rejects(buildImageFromDir(p, { name, dir }), (e) =>
      isForkdError(e, 'bad_request'),
    );
    await assert.rejects(getImage(p, name), (e) => isForkdError(e, 'bad_request'));
  }
  assert.deepEqual(await imagesDirEntries(p), []);
  for (const name of ['busybox', 'debian-12', 'py3.12_slim', '0', 'x'.repeat(63)]) {
    validateImageName(name);
  }
});

test('a missing source dir is bad_request and creates nothing', async (t) => {
  const p = await tempHome(t);
  await assert.rejects(
    buildImageFromDir(p, { name: 'nope', dir: join(p.home, 'does-not-exist') }),
    (e) => isForkdError(e, 'bad_request'),
  );
  assert.deepEqual(await imagesDirEntries(p), []);
});

test('get and remove: image_not_found names the verbs to use', async (t) => {
  const p = await tempHome(t);
  const dir = await sourceTree(t);
  await buildImageFromDir(p, { name: 'gone', dir });
  await removeImage(p, 'gone');
  assert.deepEqual(await imagesDirEntries(p), []);
  await assert.rejects(getImage(p, 'gone'), (e) => {
    assert.ok(isForkdError(e, 'image_not_found'));
    assert.match(e.message, /forkd images/);
    assert.match(e.message, /forkd image build/);
    return true;
  });
  await assert.rejects(removeImage(p, 'gone'), (e) => isForkdError(e, 'image_not_found'));
});

test('listing skips staging dirs and sweeps stale ones whose builder is gone', async (t) => {
  const p = await tempHome(t);
  const dir = await sourceTree(t);
  await buildImageFromDir(p, { name: 'kept', dir });
  const live = join(p.images, `.staging-${process.pid}-live`);
  const stale = join(p.images, '.staging-999999999-stale');
  await mkdir(live);
  await mkdir(stale);
  const twoHoursAgo = new Date(Date.now() - 2 * 60 * 60 * 1000);
  await utimes(stale, twoHoursAgo, twoHoursAgo);
  await utimes(live, twoHoursAgo, twoHoursAgo);

  assert.deepEqual(
    (await listImages(p)).map((i) => i.name),
    ['kept'],
  );
  assert.deepEqual((await imagesDirEntries(p)).sort(), [`.staging-${process.pid}-live`, 'kept']);
});

test(
  'deleting a build tree detaches mounts below it instead of deleting through them',
  { skip: process.getuid?.() !== 0 && 'mount needs root' },
  async (t) => {
    const outside = await mkdtemp(join(tmpdir(), 'forkd-outside-'));
    const tree = await mkdtemp(join(tmpdir(), 'forkd-mounted-'));
    t.after(() => rm(outside, { recursive: true, force: true }));
    t.after(() => rm(tree, { recursive: true, force: true }));
    await writeFile(join(outside, 'precious'), 'keep me\n');
    await mkdir(join(tree, 'dev'));
    await run('mount', ['--bind', outside, join(tree, 'dev')]);

    await removeTree(tree);
    assert.equal(await readFile(join(outside, 'precious'), 'utf8'), 'keep me\n');
    await assert.rejects(readdir(tree), { code: 'ENOENT' });
  },
);
