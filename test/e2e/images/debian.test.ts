/**
 * A real Debian build: debootstrap bookworm minbase from the host's apt mirror. The package
 * cache is seeded from the set-up home's (setup.sh built the Python test image with the
 * same mirror, so every minbase package is there): the build then fetches only the indexes,
 * which is what a rebuild does. With no cache to seed from, the build downloads (~30 MB)
 * and a second, cached build checks that nothing is downloaded again.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFile, link, mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../../src/config.js';
import { paths } from '../../../src/config.js';
import { buildDebianImage } from '../../../src/services/images/index.js';
import { BASE_HOME } from '../../helpers/home.js';
import { ext4Check, ext4Read, ext4Stat, imagesDirEntries, tempHome } from './fixtures.js';

const cacheOf = (p: Paths) => join(p.home, 'cache', 'debootstrap');

/** Link (or copy, across filesystems) the set-up home's cached packages; how many. */
async function seedCache(p: Paths): Promise<number> {
  const from = cacheOf(paths(BASE_HOME));
  const debs = (await readdir(from).catch(() => [])).filter((f) => f.endsWith('.deb'));
  await mkdir(cacheOf(p), { recursive: true });
  for (const f of debs) {
    await link(join(from, f), join(cacheOf(p), f)).catch(() =>
      copyFile(join(from, f), join(cacheOf(p), f)),
    );
  }
  return debs.length;
}

const packageDownloads = (lines: string[]) =>
  lines.filter((l) => /^I: Retrieving (?!InRelease|Packages)/.test(l));

test(
  'debian image: debootstrap bookworm minbase from the mirror; cached packages are not downloaded again',
  { skip: process.getuid?.() !== 0 && 'debootstrap needs root', timeout: 15 * 60 * 1000 },
  async (t) => {
    const p = await tempHome(t);
    const seeded = await seedCache(p);
    const lines: string[] = [];
    const image = await buildDebianImage(p, { name: 'bookworm', suite: 'bookworm' }, (l) =>
      lines.push(l),
    );
    assert.ok(
      lines.some((l) => l.startsWith('I: Retrieving')),
      'debootstrap progress streamed',
    );
    assert.deepEqual(await imagesDirEntries(p), ['bookworm']);
    assert.equal(image.source.kind, 'debian');
    assert.match(image.source.kind === 'debian' ? image.source.mirror : '', /^(https?|file):/);
    await ext4Check(image.path);
    const osRelease = (await ext4Read(image.path, '/usr/lib/os-release')).toString();
    assert.match(osRelease, /VERSION_CODENAME=bookworm/);
    assert.equal((await ext4Stat(image.path, '/usr/bin/dpkg')).type, 'regular');
    assert.equal((await ext4Read(image.path, '/etc/hostname')).toString(), 'forkd\n');
    assert.equal((await ext4Read(image.path, '/etc/resolv.conf')).length, 0, 'no host resolv.conf');
    const cached = await readdir(cacheOf(p));
    assert.ok(
      cached.some((f) => f.startsWith('dpkg_')),
      'packages kept in the cache',
    );
    if (seeded > 0) {
      assert.deepEqual(packageDownloads(lines), [], 'cached packages are not downloaded again');
      return;
    }
    const again: string[] = [];
    await buildDebianImage(p, { name: 'bookworm', suite: 'bookworm', force: true }, (l) =>
      again.push(l),
    );
    assert.deepEqual(packageDownloads(again), [], 'the rebuild downloads no package again');
  },
);
