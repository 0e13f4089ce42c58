/**
 * An image that snapshots or sandboxes use cannot be removed or replaced: `forkd image rm`
 * and `forkd image build --force` refuse with `image_in_use`, naming them, and leave the
 * image as it was; once they are gone, removal works. Real VMs, CLI as a user runs it.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { forkd } from '../../helpers/cli.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { caller, closeAndCheck, startServices, type TestServices } from '../../helpers/services.js';

let home: TestHome;
let s: TestServices;

before(async () => {
  home = await makeTestHome();
  s = await startServices(home);
  const built = await forkd(['image', 'build', '--busybox', '--name', 'bb2'], { env: home.env });
  assert.equal(built.code, 0, built.stderr);
});

after(() => closeAndCheck(s, home));

const rootfs = () => join(home.paths.images, 'bb2', 'rootfs.ext4');

async function refused(args: string[], user: RegExp): Promise<void> {
  const r = await forkd(args, { env: home.env });
  assert.equal(r.code, 4, r.stderr); // refused: image_in_use (docs/cli.md, Exit codes)
  assert.match(r.stderr, /\[image_in_use\]/);
  assert.match(r.stderr, user);
  assert.ok(existsSync(rootfs()), 'the image is gone');
}

test('image rm refuses while a sandbox runs from the image', async () => {
  const sb = await s.sandboxes.create({ image: 'bb2' }, caller);
  await refused(['image', 'rm', 'bb2'], new RegExp(`sandbox ${sb.id}`));
  await s.sandboxes.kill(sb.id);
});

test('image rm and build --force refuse while a snapshot is built on the image', async () => {
  await s.snapshots.create({ tag: 'on-bb2', image: 'bb2' }, caller);
  await refused(['image', 'rm', 'bb2'], /snapshot on-bb2/);
  await refused(['image', 'build', '--busybox', '--name', 'bb2', '--force'], /snapshot on-bb2/);
  const [kid] = (await s.snapshots.fork({ snapshot: 'on-bb2', n: 1 }, caller)).sandboxes;
  assert.equal(kid?.state, 'running', 'the snapshot still forks');
  await s.sandboxes.kill(kid?.id as string);
  await s.snapshots.remove('on-bb2', {});
  const r = await forkd(['image', 'rm', 'bb2'], { env: home.env });
  assert.equal(r.code, 0, r.stderr);
  assert.ok(!existsSync(rootfs()));
});
