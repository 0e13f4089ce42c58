/** `forkd image …` and `forkd images` as a user runs them: exit codes, streams, JSON. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { forkd } from '../../helpers/cli.js';
import { imagesDirEntries, tempHome } from './fixtures.js';

test('build from a dir, list, remove: human and --json output', async (t) => {
  const p = await tempHome(t);
  const env = { ...process.env, FORKD_HOME: p.home };
  const dir = await mkdtemp(join(tmpdir(), 'forkd-cli-tree-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'hello'), 'hi\n');

  const built = await forkd(
    ['image', 'build', '--from-dir', dir, '--name', 'tree', '--size', '300M'],
    {
      env,
    },
  );
  assert.equal(built.code, 0, built.stderr);
  assert.match(built.stdout.toString(), /^image tree: 300 MiB ext4/);
  assert.match(built.stderr, /writing a 300 MiB ext4 filesystem/, 'progress on stderr');

  const json = await forkd(['images', '--json'], { env });
  assert.equal(json.code, 0, json.stderr);
  const images = JSON.parse(json.stdout.toString());
  assert.equal(images.length, 1);
  assert.equal(images[0].name, 'tree');
  assert.equal(images[0].size_bytes, 300 * 1024 * 1024);
  assert.deepEqual(images[0].source, { kind: 'dir', dir });

  const table = await forkd(['image', 'ls'], { env });
  const [header, row] = table.stdout.toString().trim().split('\n');
  assert.match(header ?? '', /^NAME\s+SIZE\s+DISK\s+CREATED\s+SOURCE\s+BOOT SNAPSHOTS$/);
  assert.match(row ?? '', /^tree\s+300 MiB\s+/);

  const again = await forkd(['image', 'build', '--from-dir', dir, '--name', 'tree', '--json'], {
    env,
  });
  assert.equal(again.code, 4);
  assert.equal(JSON.parse(again.stderr).error.code, 'name_taken');
  assert.equal(again.stdout.length, 0);

  const removed = await forkd(['image', 'rm', 'tree'], { env });
  assert.equal(removed.code, 0, removed.stderr);
  assert.deepEqual(await imagesDirEntries(p), []);
  const missing = await forkd(['image', 'rm', 'tree'], { env });
  assert.equal(missing.code, 3);
  assert.match(missing.stderr, /image_not_found/);
});

test('--json build prints the image and no progress', async (t) => {
  const p = await tempHome(t);
  const env = { ...process.env, FORKD_HOME: p.home };
  const r = await forkd(['image', 'build', '--busybox', '--name', 'bb', '--json'], { env });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stderr, '');
  const image = JSON.parse(r.stdout.toString());
  assert.equal(image.name, 'bb');
  assert.equal(image.source.kind, 'busybox');
});

test('usage errors exit 2 and create nothing', async (t) => {
  const p = await tempHome(t);
  const env = { ...process.env, FORKD_HOME: p.home };
  for (const args of [
    ['--name', 'x'],
    ['--busybox', '--from-dir', '/', '--name', 'x'],
    ['--busybox'],
    ['--busybox', '--name', '../x'],
    ['--busybox', '--name', 'x', '--size', 'lots'],
    ['--busybox', '--name', 'x', '--packages', 'curl'],
    ['--from-dir', join(p.home, 'missing'), '--name', 'x'],
    ['--debian', 'no-such-suite', '--name', 'x'],
  ]) {
    const r = await forkd(['image', 'build', ...args], { env });
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /\[bad_request\]/);
  }
  assert.deepEqual(await imagesDirEntries(p), []);
});
