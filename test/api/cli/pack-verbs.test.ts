/**
 * The CLI's pack verbs — `forkd pack|unpack|push|pull` — against the API app over the fake
 * services: `--json` answers in the API's shape, plain output prints what a script needs
 * (the file, the tag, REF@DIGEST), refusals exit with their catalog code's exit code. The
 * packs themselves (files, registry, VMs) are the end-to-end tests' job (test/e2e/packs).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cliOverFakes, out } from '../../helpers/fake-cli.js';
import { SEED } from '../../helpers/fake-services.js';

const { fake, forkd, json } = cliOverFakes('forkd-cli-pack-');

test('pack, unpack, push, pull: --json in the API shape, plain output for scripts', async () => {
  fake.reset();
  const packed = await json<{ file: string; chain: string[] }>(
    'pack',
    SEED.snapshot,
    '-o',
    'x.tar.zst',
  );
  assert.match(packed.file, /^\/.*x\.tar\.zst$/, 'the path is made absolute for the daemon');
  assert.deepEqual(packed.chain, [SEED.snapshot]);

  const un = await forkd('unpack', '/tmp/x.forkd.tar.zst', '--tag', 'copy');
  assert.equal(un.code, 0, un.stderr.toString());
  assert.equal(out(un), 'copy\n');
  const again = await forkd('unpack', '/tmp/x.forkd.tar.zst', '--tag', 'copy');
  assert.equal(again.code, 4, 'name_taken: refused');
  assert.match(again.stderr.toString(), /already exists/);
  assert.equal((await forkd('unpack', '/tmp/x.forkd.tar.zst', '--tag', 'copy', '--force')).code, 0);

  const pushed = await forkd('push', SEED.snapshot, '127.0.0.1:5000/team/env:1');
  assert.equal(pushed.code, 0, pushed.stderr.toString());
  assert.match(out(pushed), /^127\.0\.0\.1:5000\/team\/env:1@sha256:0{64}\n$/);
  assert.match(pushed.stderr.toString(), /5 uploaded/);

  const pulled = await json<{ tag: string; bytes_resumed: number }>(
    'pull',
    '127.0.0.1:5000/team/env:1',
    '--tag',
    'p1',
  );
  assert.equal(pulled.tag, 'p1');
  assert.equal(pulled.bytes_resumed, 0);

  assert.equal((await forkd('pack', 'nope', '-o', '/tmp/y')).code, 3, 'snapshot_not_found');
  assert.equal((await forkd('pack', SEED.snapshot)).code, 2, '-o is required');
  assert.equal((await forkd('pull', 'x', '--tag', 'Bad Tag')).code, 2);
});
