/**
 * A registry that drops the connection mid-pull: Debian's real `docker-registry` on loopback
 * behind a loopback TCP proxy that cuts every connection after a few KiB of a layer, or
 * stalls it. The pull fails with a clear registry error, leaves no staging dir, temp blob or
 * image under its name, and the same pull straight from the registry then works. Then a real
 * daemon SIGKILLed mid-pull (mid-download, and with the image staged but not yet published):
 * after a restart no image, temp blob, staging dir or process is left, and the pull works.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RegistryClient } from '../../../src/drivers/registry/index.js';
import { getImage, pullImage } from '../../../src/services/images/index.js';
import { blobDir } from '../../../src/services/images/cache.js';
import { ERROR_CATALOG, isForkdError } from '../../../src/errors.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { forkd } from '../../helpers/cli.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { assertNoOrphans, killWhen, namesIn } from '../../helpers/daemon-kill.js';
import { cuttingProxy } from './cutting-proxy.js';
import { layerFromDir, ociImage, push, startRegistry, type TestRegistry } from './registry.js';

let home: TestHome;
let reg: TestRegistry;
let scratch: string;

before(async () => {
  home = await makeTestHome();
  scratch = await mkdtemp(join(tmpdir(), 'forkd-pull-cut-'));
  reg = await startRegistry();
  const dir = join(scratch, 'layer');
  await mkdir(dir);
  await writeFile(join(dir, 'blob.bin'), randomBytes(3 * 1024 * 1024));
  const layer = await layerFromDir(dir, join(scratch, 'L'), 'gzip');
  await push(new RegistryClient(reg.host), 'team/big', '1', ociImage([layer], {}), scratch);
});

after(async () => {
  await reg?.stop();
  await rm(scratch, { recursive: true, force: true });
  await home?.cleanup();
});

/** No image, no staging dir and no temp or partial blob survived. */
async function assertNothingLeft(): Promise<void> {
  assert.deepEqual(
    await readdir(home.paths.images).then((n) => n.filter((x) => x !== 'busybox')),
    [],
  );
  const blobs = await readdir(blobDir(home.paths)).catch(() => [] as string[]);
  assert.deepEqual(
    blobs.filter((n) => n.startsWith('.')),
    [],
    'a temp blob was left',
  );
  await assert.rejects(getImage(home.paths, 'big'), (e) => isForkdError(e, 'image_not_found'));
}

for (const how of ['cut', 'stall'] as const) {
  test(
    `a registry that ${how}s the connection mid-layer: a clear error, nothing left`,
    { timeout: 180_000 },
    async () => {
      const proxy = await cuttingProxy(reg.host, 64 * 1024, how);
      const abort = new AbortController();
      // A stalled transfer is the client's to give up on: a user would press Ctrl-C.
      const timer = how === 'stall' ? setTimeout(() => abort.abort(), 5000) : undefined;
      try {
        const started = Date.now();
        const err = await pullImage(home.paths, {
          reference: `${proxy.host}/team/big:1`,
          name: 'big',
          signal: abort.signal,
        }).then(
          () => assert.fail('the pull succeeded through a cutting proxy'),
          (e: unknown) => e,
        );
        assert.ok(
          isForkdError(err) && ERROR_CATALOG[err.code],
          `not a catalog error: ${String(err)}`,
        );
        assert.ok(proxy.cuts() > 0, 'the proxy never cut');
        assert.notEqual(err.code, 'internal', err.message);
        assert.match(err.message, /registry|connection|broke off|abort|cancel/i);
        assert.ok(Date.now() - started < 120_000, 'the pull took too long to fail');
      } finally {
        clearTimeout(timer);
        await proxy.close();
      }
      await assertNothingLeft();
    },
  );
}

test(
  'the daemon SIGKILLed mid-pull (downloading, then staged): after a restart nothing is left, the pull works',
  { timeout: 240_000 },
  async () => {
    const crash = join(scratch, 'crash');
    home.env.FORKD_CRASH_FILE = crash;
    let daemon: DaemonProcess | undefined = await startDaemon(home);
    const proxy = await cuttingProxy(reg.host, 64 * 1024, 'stall');
    const pull = (from: string) =>
      forkd(['image', 'pull', `${from}/team/big:1`, '--name', 'killed', '--json'], {
        env: { ...home.env, FORKD_URL: daemon!.url },
      });
    const afterRestart = async () => {
      daemon = await startDaemon(home);
      await assertNothingLeft();
      await assertNoOrphans(home, daemon);
    };
    try {
      // 1. Killed while the layer downloads (the stalled proxy holds it after 64 KiB).
      const cut = pull(proxy.host);
      const tempBlob = async () =>
        (await namesIn(blobDir(home.paths), (n) => n.startsWith('.tmp-'))).length > 0;
      await killWhen(daemon, tempBlob, 'the download');
      const r = await cut;
      assert.notEqual(r.code, 0, 'the CLI reported success for a pull whose daemon died');
      assert.match(r.stderr, /daemon|connection|socket/i, r.stderr);
      await afterRestart();

      // 2. Killed by a crash point with the image built in staging, before it is published.
      await writeFile(crash, 'image:staged');
      const staged = await pull(reg.host);
      await daemon.exited;
      assert.notEqual(staged.code, 0, 'the CLI reported success for a pull whose daemon died');
      const left = await namesIn(home.paths.images, (n) => n.startsWith('.staging-'));
      assert.equal(left.length, 1, 'the crash point was not reached');
      await afterRestart();

      // 3. The same pull again: it works.
      const ok = await pull(reg.host);
      assert.equal(ok.code, 0, ok.stderr);
      assert.equal((await getImage(home.paths, 'killed')).name, 'killed');
    } finally {
      delete home.env.FORKD_CRASH_FILE;
      await proxy.close();
      await daemon?.stop();
    }
  },
);

test(
  'after the cuts the same pull straight from the registry works',
  { timeout: 120_000 },
  async () => {
    const img = await pullImage(home.paths, { reference: `${reg.host}/team/big:1`, name: 'big' });
    assert.equal(img.name, 'big');
  },
);
