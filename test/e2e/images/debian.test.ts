/**
 * A real Debian build: debootstrap bookworm minbase from the host's apt mirror, twice, the
 * second time from the package cache. Needs root and network; takes about a minute.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { buildDebianImage } from '../../../src/services/images/index.js';
import { ext4Check, ext4Read, ext4Stat, imagesDirEntries, tempHome } from './fixtures.js';

test(
  'SLOW debian image: debootstrap bookworm minbase (downloads ~30 MB), then a cached rebuild',
  { skip: process.getuid?.() !== 0 && 'debootstrap needs root', timeout: 15 * 60 * 1000 },
  async (t) => {
    const p = await tempHome(t);
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

    const cached = await readdir(join(p.home, 'cache', 'debootstrap'));
    assert.ok(
      cached.some((f) => f.startsWith('dpkg_')),
      'packages kept in the cache',
    );
    const again: string[] = [];
    await buildDebianImage(p, { name: 'bookworm', suite: 'bookworm', force: true }, (l) =>
      again.push(l),
    );
    const downloads = again.filter((l) => /^I: Retrieving (?!InRelease|Packages)/.test(l));
    assert.deepEqual(downloads, [], 'the rebuild downloads no package again');
  },
);
