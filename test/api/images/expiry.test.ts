/**
 * The daemon's sweep of cache images (services/images/expiry.ts through ImageManager):
 * started with the service, it removes a cache image unused for the image cache time and
 * keeps a younger one and an image that is not a cache entry. Files in a temp FORKD_HOME,
 * no VM: the images are image.json files beside an empty rootfs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { paths } from '../../../src/config.js';
import { ImageManager } from '../../../src/services/images/index.js';

async function image(dir: string, name: string, createdAt: Date, cache: boolean): Promise<void> {
  await mkdir(join(dir, name), { recursive: true });
  await writeFile(join(dir, name, 'rootfs.ext4'), '');
  const manifest = {
    name,
    format: 'ext4',
    size_bytes: 0,
    disk_bytes: 0,
    created_at: createdAt.toISOString(),
    source: { kind: 'dir', dir: '/nonexistent' },
    ...(cache ? { cache: true } : {}),
  };
  await writeFile(join(dir, name, 'image.json'), JSON.stringify(manifest));
}

test('the daemon removes a cache image unused for the cache time, and keeps the others', async () => {
  const home = await mkdtemp(join(tmpdir(), 'forkd-expiry-'));
  const p = paths(home);
  const dropped: string[][] = [];
  const images = new ImageManager(p, undefined, {
    ttlS: 3600,
    dropPools: async (tags) => void dropped.push(tags),
    warn: (msg) => assert.fail(msg),
  });
  try {
    const old = new Date(Date.now() - 48 * 3600_000);
    await image(p.images, 'rootfs-old', old, true);
    await image(p.images, 'rootfs-new', new Date(), true);
    await image(p.images, 'app', old, false);
    await images.start();
    for (let i = 0; i < 100 && existsSync(join(p.images, 'rootfs-old')); i++) await sleep(50);
    assert.deepEqual((await images.list()).map((i) => [i.name, i.cache ?? false]).sort(), [
      ['app', false],
      ['rootfs-new', true],
    ]);
    assert.deepEqual(dropped, [[]], 'no boot snapshot, so no pool to end');
    // A prune takes every cache image nothing uses, whatever its age.
    assert.deepEqual((await images.prune()).images, ['rootfs-new']);
  } finally {
    images.close();
    await rm(home, { recursive: true, force: true });
  }
});
