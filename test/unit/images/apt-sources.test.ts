/** Finding the Debian mirror in the host's apt sources (fake sources in a temp dir). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { findAptMirror } from '../../../src/services/images/index.js';

async function aptDir(t: TestContext, files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-apt-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await mkdir(join(dir, 'sources.list.d'));
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  return dir;
}

const DEB822 = `# a comment
Types: deb deb-src
URIs: http://mirror.example/debian
Suites: bookworm
  bookworm-updates
Components: main

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: sid
`;

test('deb822 sources: the URI whose Suites list the suite (continuation lines too)', async (t) => {
  const dir = await aptDir(t, { 'sources.list.d/debian.sources': DEB822 });
  assert.equal(await findAptMirror('bookworm', dir), 'http://mirror.example/debian');
  assert.equal(await findAptMirror('bookworm-updates', dir), 'http://mirror.example/debian');
  assert.equal(
    await findAptMirror('bookworm-security', dir),
    'http://security.example/debian-security',
  );
});

test('a suite the host does not use falls back to a Debian archive; disabled stanzas are ignored', async (t) => {
  const dir = await aptDir(t, { 'sources.list.d/debian.sources': DEB822 });
  assert.equal(await findAptMirror('sid', dir), 'http://mirror.example/debian');
  const other = await aptDir(t, {
    'sources.list': 'deb http://ubuntu.example/ubuntu jammy main\n',
  });
  assert.equal(await findAptMirror('bookworm', other), undefined);
});

test('one-line sources.list and *.list, with options and comments', async (t) => {
  const dir = await aptDir(t, {
    'sources.list':
      '# deb http://commented.example/debian bookworm main\n' +
      'deb-src http://src.example/debian bookworm main\n' +
      'deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian trixie main # tail\n',
    'sources.list.d/extra.list': 'deb http://extra.example/debian/ forky main\n',
    'sources.list.d/ignored.list.disabled': 'deb http://nope.example/debian bookworm main\n',
  });
  assert.equal(await findAptMirror('trixie', dir), 'http://mirror.example/debian');
  assert.equal(await findAptMirror('forky', dir), 'http://extra.example/debian/');
});

test('no sources at all: undefined', async (t) => {
  assert.equal(await findAptMirror('bookworm', await aptDir(t, {})), undefined);
});
