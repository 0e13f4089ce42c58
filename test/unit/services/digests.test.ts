/**
 * The digest of a write-once file (an image's rootfs) is kept while the file is unchanged
 * on disk and computed again once it is rewritten or replaced, so a pack never records the
 * digest of content that is no longer there.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rename, rm, writeFile, appendFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256File, sha256StableFile } from '../../../src/services/snapshots/files.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'forkd-digests-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

test('a write-once file keeps its digest until it is rewritten or replaced', async () => {
  const file = join(dir, 'rootfs.ext4');
  await writeFile(file, 'first');
  const first = await sha256StableFile(file);
  assert.equal(first, await sha256File(file));
  assert.equal(await sha256StableFile(file), first);

  await appendFile(file, ' and more'); // same inode, new content
  assert.equal(await sha256StableFile(file), await sha256File(file));
  assert.notEqual(await sha256StableFile(file), first);

  const other = join(dir, 'new.ext4');
  await writeFile(other, 'first');
  await rename(other, file); // another inode under the same path, the first content
  assert.equal(await sha256StableFile(file), first);
});
