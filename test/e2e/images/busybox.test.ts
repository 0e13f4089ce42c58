/** The default offline image: built from the host's static busybox with no network. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CLI } from '../../helpers/cli.js';
import { run } from '../../../src/util/exec.js';
import { getImage, HOST_BUSYBOX, isStaticElf } from '../../../src/services/images/index.js';
import { ext4Check, ext4Read, ext4Stat, tempHome } from './fixtures.js';

const asRoot = process.getuid?.() === 0;

test(
  'the busybox image builds in an empty network namespace, with /bin/sh → busybox',
  { skip: !asRoot && 'needs root for unshare --net' },
  async (t) => {
    const p = await tempHome(t);
    const env = { ...process.env, FORKD_HOME: p.home };
    const args = [
      '--net',
      process.execPath,
      CLI,
      'image',
      'build',
      '--busybox',
      '--name',
      'busybox',
    ];
    await run('unshare', args, { env });
    const image = await getImage(p, 'busybox');

    assert.equal(image.source.kind, 'busybox');
    await ext4Check(image.path);
    const sh = await ext4Stat(image.path, '/bin/sh');
    assert.equal(sh.type, 'symlink');
    assert.equal(sh.target, '/bin/busybox');
    assert.equal((await ext4Stat(image.path, '/bin/busybox')).mode, 0o755);
    assert.equal((await ext4Stat(image.path, '/tmp')).mode, 0o1777);
    assert.equal((await ext4Stat(image.path, '/root')).mode, 0o700);
    for (const dir of ['/proc', '/sys', '/dev', '/run', '/home', '/var', '/mnt', '/usr/bin']) {
      assert.equal((await ext4Stat(image.path, dir)).type, 'directory', dir);
    }
    const passwd = (await ext4Read(image.path, '/etc/passwd')).toString();
    assert.match(passwd, /^root:x:0:0:root:\/root:\/bin\/sh$/m);
    assert.match((await ext4Read(image.path, '/etc/os-release')).toString(), /forkd busybox/);
  },
);

test('the host busybox is recognised as a static binary, node as a dynamic one', async () => {
  assert.equal(await isStaticElf(HOST_BUSYBOX), true);
  assert.equal(await isStaticElf(process.execPath), false);
});
