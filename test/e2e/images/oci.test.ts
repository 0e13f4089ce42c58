/**
 * Images from OCI registries and archives, against Debian's real `docker-registry` on
 * loopback: layers built here from local directories (whiteouts, an opaque dir, symlinks,
 * a hard link, setuid, a 1000:1000 file, a capability xattr, a file deleted above) are
 * pushed, pulled and checked in the ext4 image; then one boot runs the image's Entrypoint,
 * and `from-image` + `fork -n 3` go through a daemon. Error cases check that nothing stays.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  chmod,
  chown,
  link,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  symlink,
  truncate,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RegistryClient, MEDIA } from '../../../src/drivers/registry/index.js';
import {
  importImage,
  pullImage,
  pruneBlobs,
  login,
  getImage,
} from '../../../src/services/images/index.js';
import { blobDir } from '../../../src/services/images/cache.js';
import { run } from '../../../src/util/exec.js';
import { isForkdError } from '../../../src/errors.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { forkd } from '../../helpers/cli.js';
import { startDaemon } from '../../helpers/daemon-process.js';
import { busyboxRoot, ext4Read, ext4Stat, ext4Check } from './fixtures.js';
import {
  layerFromDir,
  ociImage,
  push,
  sha,
  startRegistry,
  writeDockerSave,
  writeLayout,
  type BuiltImage,
  type Layer,
  type TestRegistry,
} from './registry.js';

let home: TestHome;
let reg: TestRegistry;
let scratch: string;
let client: RegistryClient;
let app1: BuiltImage;
let layers: Layer[];
const CONFIG = {
  Env: ['PATH=/bin', 'GREETING=hello-oci'],
  WorkingDir: '/app',
  User: '1000',
  Entrypoint: ['/bin/sh', '-c'],
  Cmd: [
    'echo "$GREETING $(pwd) $(id -u)"; stat -c "%n %a %u:%g" /app/suid /app/owned; test -e /app/gone.txt || echo gone-absent; ls /opq',
  ],
};
const APPLETS = ['sh', 'echo', 'stat', 'id', 'test', 'ls', 'cat', 'pwd'];

/** Three layers: a base, one that deletes and makes an opaque dir (zstd), a tiny plain one. */
async function makeLayers(): Promise<Layer[]> {
  const l1 = join(scratch, 'l1');
  await busyboxRoot(l1, APPLETS, '/app');
  await writeFile(join(l1, 'app/hello.txt'), 'hello\n');
  await symlink('hello.txt', join(l1, 'app/link'));
  await link(join(l1, 'app/hello.txt'), join(l1, 'app/hard'));
  await writeFile(join(l1, 'app/suid'), '#!/bin/sh\n');
  await chmod(join(l1, 'app/suid'), 0o4755);
  await writeFile(join(l1, 'app/owned'), 'mine\n');
  await chown(join(l1, 'app/owned'), 1000, 1000);
  await writeFile(join(l1, 'app/cap'), 'cap\n');
  await run('setfattr', [
    '-n',
    'security.capability',
    '-v',
    '0x0100000200200000000000000000000000000000',
    join(l1, 'app/cap'),
  ]);
  await writeFile(join(l1, 'app/gone.txt'), 'deleted above\n');
  await mkdir(join(l1, 'opq'));
  await writeFile(join(l1, 'opq/old.txt'), 'old\n');
  const l2 = join(scratch, 'l2');
  await mkdir(join(l2, 'app'), { recursive: true });
  await mkdir(join(l2, 'opq'));
  await writeFile(join(l2, 'app/.wh.gone.txt'), '');
  await writeFile(join(l2, 'opq/.wh..wh..opq'), '');
  await writeFile(join(l2, 'opq/new.txt'), 'new\n');
  const l3 = join(scratch, 'l3');
  await mkdir(join(l3, 'app'), { recursive: true });
  await writeFile(join(l3, 'app/v1.txt'), 'v1\n');
  return [
    await layerFromDir(l1, join(scratch, 'L1'), 'gzip'),
    await layerFromDir(l2, join(scratch, 'L2'), 'zstd'),
    await layerFromDir(l3, join(scratch, 'L3'), 'none'),
  ];
}

before(async () => {
  home = await makeTestHome();
  scratch = await mkdtemp(join(tmpdir(), 'forkd-oci-'));
  reg = await startRegistry();
  client = new RegistryClient(reg.host);
  layers = await makeLayers();
  app1 = ociImage(layers, CONFIG);
  await push(client, 'team/app', '1', app1, scratch);
});

after(async () => {
  await reg?.stop();
  await rm(scratch, { recursive: true, force: true });
  await home?.cleanup();
});

/** No staging dir, no temp blob, and none of `digests` in the cache. */
async function assertNothingLeft(digests: string[]): Promise<void> {
  const images = await readdir(home.paths.images);
  assert.deepEqual(
    images.filter((n) => n.startsWith('.')),
    [],
    'a staging dir was left',
  );
  const blobs = await readdir(blobDir(home.paths)).catch(() => [] as string[]);
  assert.deepEqual(
    blobs.filter((n) => n.startsWith('.')),
    [],
    'a temp blob was left',
  );
  for (const d of digests) assert.ok(!blobs.includes(d.slice(7)), `${d} was cached`);
}

test('a pulled image has every file, mode, owner, link and xattr; deleted files are gone', async () => {
  const image = await pullImage(home.paths, { reference: `${reg.host}/team/app:1`, name: 'app' });
  const fs = image.path;
  await ext4Check(fs);
  assert.equal((await ext4Read(fs, '/app/hello.txt')).toString(), 'hello\n');
  assert.equal((await ext4Stat(fs, '/app/link')).target, 'hello.txt');
  const suid = await ext4Stat(fs, '/app/suid');
  assert.equal(suid.mode, 0o4755);
  assert.equal((await ext4Stat(fs, '/app/owned')).uid, 1000);
  const { stdout: hard } = await run('debugfs', ['-R', 'stat /app/hard', fs]);
  assert.match(hard, /Links: 2/);
  const { stdout: ea } = await run('debugfs', ['-R', 'ea_list /app/cap', fs]);
  assert.match(ea, /security\.capability \(20\) = 01 00 00 02 00 20/);
  await assert.rejects(ext4Stat(fs, '/app/gone.txt'));
  await assert.rejects(ext4Stat(fs, '/opq/old.txt'));
  assert.equal((await ext4Read(fs, '/opq/new.txt')).toString(), 'new\n');
  assert.deepEqual(image.config, {
    env: CONFIG.Env,
    working_dir: '/app',
    user: '1000',
    entrypoint: CONFIG.Entrypoint,
    cmd: CONFIG.Cmd,
  });
  assert.equal(image.source.kind, 'oci');
  assert.equal((image.source as { digest: string }).digest, app1.manifestDigest);
  const again = await pullImage(home.paths, { reference: `${reg.host}/team/app:1`, name: 'app' });
  assert.equal(again.created_at, image.created_at, 'the same digest was rebuilt');
});

test('a second image sharing layers downloads only its new layer', async () => {
  const l4dir = join(scratch, 'l4');
  await mkdir(join(l4dir, 'app'), { recursive: true });
  await writeFile(join(l4dir, 'app/v2.txt'), 'v2\n');
  const l4 = await layerFromDir(l4dir, join(scratch, 'L4'), 'gzip');
  const app2 = ociImage([layers[0]!, layers[1]!, l4], CONFIG);
  await push(client, 'team/app', '2', app2, scratch);
  const before = reg.log().length;
  const image = await pullImage(home.paths, { reference: `${reg.host}/team/app:2`, name: 'app2' });
  const gets = [
    ...reg
      .log()
      .slice(before)
      .matchAll(/"GET \/v2\/team\/app\/blobs\/(sha256:[a-f0-9]{64})/g),
  ].map((m) => m[1]);
  assert.deepEqual(
    gets.filter((d) => d !== sha(app2.config)),
    [l4.digest],
  );
  assert.equal((await ext4Read(image.path, '/app/v2.txt')).toString(), 'v2\n');
  await assert.rejects(ext4Stat(image.path, '/app/v1.txt'));
});

test('a multi-arch index resolves to linux/amd64', async () => {
  const arm = ociImage(layers.slice(0, 1), CONFIG, 'arm64');
  await push(client, 'team/multi', 'arm', arm, scratch);
  await push(client, 'team/multi', 'amd', app1, scratch);
  const entry = (img: BuiltImage, architecture: string) => ({
    mediaType: MEDIA.ociManifest,
    digest: img.manifestDigest,
    size: img.manifest.length,
    platform: { os: 'linux', architecture },
  });
  const index = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA.ociIndex,
      manifests: [entry(arm, 'arm64'), entry(app1, 'amd64')],
    }),
  );
  await client.putManifest('team/multi', 'all', MEDIA.ociIndex, index);
  const image = await pullImage(home.paths, {
    reference: `${reg.host}/team/multi:all`,
    name: 'multi',
  });
  assert.equal((image.source as { digest: string }).digest, app1.manifestDigest);
  assert.equal((image.source as { platform: string }).platform, 'linux/amd64');
  await assert.rejects(
    pullImage(home.paths, {
      reference: `${reg.host}/team/multi:all`,
      name: 'm2',
      platform: 'linux/s390x',
    }),
    (e) => isForkdError(e, 'image_format_unsupported'),
  );
});

test('OCI layout (dir and tar) and docker save imports build the same rootfs as the pull', async () => {
  const layoutDir = join(scratch, 'layout');
  await writeLayout(layoutDir, app1, '1');
  const layoutTar = join(scratch, 'layout.tar');
  await run('tar', ['-C', layoutDir, '-cf', layoutTar, '.']);
  const saveDir = join(scratch, 'save');
  await writeDockerSave(saveDir, app1, 'team/app:1');
  const saveTar = join(scratch, 'save.tar');
  await run('tar', ['-C', saveDir, '-cf', saveTar, '.']);
  const pulled = await getImage(home.paths, 'app');
  const tree = async (fs: string) =>
    (await run('debugfs', ['-R', 'ls -l -p /app', fs])).stdout
      .split('\n')
      .map((l) =>
        l
          .split('/')
          .filter((_, i) => i !== 1 && i !== 7)
          .join('/'),
      )
      .sort();
  const want = await tree(pulled.path);
  for (const [name, path] of [
    ['lay', layoutDir],
    ['laytar', layoutTar],
    ['save', saveTar],
  ] as const) {
    const image = await importImage(home.paths, { path, name });
    assert.deepEqual(await tree(image.path), want, `${name} differs from the pull`);
    assert.deepEqual(image.config, pulled.config);
  }
});

test('a bad digest, a truncated layer, an unknown media type, a 404 tag: clear errors, nothing left', async () => {
  const data = (d: string) =>
    join(reg.dataDir, 'docker/registry/v2/blobs/sha256', d.slice(7, 9), d.slice(7), 'data');
  const mk = async (name: string, text: string) => {
    const dir = join(scratch, name);
    await mkdir(dir);
    await writeFile(join(dir, `${name}.txt`), text);
    return layerFromDir(dir, join(scratch, name.toUpperCase()), 'gzip');
  };
  const bad = await mk('bad', 'x'.repeat(5000));
  await push(client, 'team/bad', '1', ociImage([layers[0]!, bad], CONFIG), scratch);
  const orig = await readFile(data(bad.digest));
  const flipped = Buffer.from(orig);
  flipped[flipped.length - 10] = flipped[flipped.length - 10]! ^ 0xff;
  await writeFile(data(bad.digest), flipped);
  await assert.rejects(
    pullImage(home.paths, { reference: `${reg.host}/team/bad:1`, name: 'bad' }),
    (e) => isForkdError(e, 'blob_invalid') && /digest/.test((e as Error).message),
  );
  await truncate(data(bad.digest), orig.length - 100);
  await assert.rejects(
    pullImage(home.paths, { reference: `${reg.host}/team/bad:1`, name: 'bad' }),
    (e) => isForkdError(e, 'blob_invalid'),
  );
  await assertNothingLeft([bad.digest]);
  await assert.rejects(getImage(home.paths, 'bad'));

  const odd = await mk('odd', 'odd');
  const oddImg = ociImage([odd], CONFIG);
  const manifest = JSON.parse(oddImg.manifest.toString()) as { layers: { mediaType: string }[] };
  manifest.layers[0]!.mediaType = 'application/vnd.example.unknown';
  await push(client, 'team/odd', 'x', oddImg, scratch);
  await client.putManifest(
    'team/odd',
    '1',
    MEDIA.ociManifest,
    Buffer.from(JSON.stringify(manifest)),
  );
  await assert.rejects(
    pullImage(home.paths, { reference: `${reg.host}/team/odd:1`, name: 'odd' }),
    (e) =>
      isForkdError(e, 'image_format_unsupported') &&
      /application\/vnd\.example\.unknown/.test((e as Error).message),
  );
  await assert.rejects(
    pullImage(home.paths, { reference: `${reg.host}/team/app:nope`, name: 'nope' }),
    (e) => isForkdError(e, 'reference_not_found'),
  );
  await assertNothingLeft([odd.digest]);
});

test('basic and token auth: 401 without credentials, then Docker config and forkd login work', async (t) => {
  for (const kind of ['basic', 'token'] as const) {
    const secured = await startRegistry({ kind, user: 'ci', password: 's3cret' });
    t.after(() => secured.stop());
    const creds = async () => ({ username: 'ci', password: 's3cret' });
    await push(
      new RegistryClient(secured.host, { credentials: creds }),
      'team/app',
      '1',
      app1,
      scratch,
    );
    const ref = `${secured.host}/team/app:1`;
    await assert.rejects(
      pullImage(home.paths, { reference: ref, name: `${kind}-x` }),
      (e) => isForkdError(e, 'registry_unauthorized') && /forkd login/.test((e as Error).message),
    );
    await assert.rejects(
      login(home.paths, secured.host, { username: 'ci', password: 'wrong' }),
      (e) => isForkdError(e, 'registry_unauthorized'),
    );
    if (kind === 'basic') {
      const docker = join(scratch, 'docker');
      await mkdir(docker, { recursive: true });
      await writeFile(
        join(docker, 'config.json'),
        JSON.stringify({
          auths: { [secured.host]: { auth: Buffer.from('ci:s3cret').toString('base64') } },
        }),
      );
      process.env.DOCKER_CONFIG = docker;
      t.after(() => delete process.env.DOCKER_CONFIG);
    } else {
      await login(home.paths, secured.host, { username: 'ci', password: 's3cret' });
    }
    const image = await pullImage(home.paths, { reference: ref, name: kind });
    assert.equal((image.source as { digest: string }).digest, app1.manifestDigest);
    delete process.env.DOCKER_CONFIG;
  }
});

test('prune removes only blobs no image uses', async () => {
  const before = await readdir(blobDir(home.paths));
  const r = await pruneBlobs(home.paths);
  const after = await readdir(blobDir(home.paths));
  // Every layer of app:1 is still used by the images built from it.
  for (const l of layers) assert.ok(after.includes(l.digest.slice(7)));
  assert.equal(before.length - after.length, r.blobs);
});

test(
  'booting the pulled image with no command runs its Entrypoint with its Env, WorkingDir and User',
  { timeout: 240_000 },
  async () => {
    const r = await forkd(['run', '--image', 'app'], { env: home.env });
    assert.equal(r.code, 0, r.stderr);
    const out = r.stdout.toString();
    assert.match(out, /^hello-oci \/app 1000$/m);
    assert.match(out, /\/app\/suid 4755 0:0/);
    assert.match(out, /\/app\/owned 644 1000:1000/);
    assert.match(out, /^gone-absent$/m);
    assert.match(out, /^new\.txt$/m);
    assert.doesNotMatch(out, /old\.txt/);
  },
);

test('from-image then fork -n 3', { timeout: 400_000 }, async (t) => {
  const daemon = await startDaemon(home);
  t.after(() => daemon.stop());
  const env = { ...home.env, FORKD_URL: daemon.url };
  const made = await forkd(
    [
      'from-image',
      `${reg.host}/team/app:1`,
      '--name',
      'app',
      '--tag',
      'appsnap',
      '--warm',
      'echo warm > /tmp/w',
      '--json',
    ],
    { env },
  );
  assert.equal(made.code, 0, made.stderr);
  const again = await forkd(
    ['from-image', `${reg.host}/team/app:1`, '--name', 'app', '--tag', 'appsnap', '--json'],
    { env },
  );
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout.toString(), /"reused":true/);
  const forked = await forkd(['fork', 'appsnap', '-n', '3', '--json'], { env });
  assert.equal(forked.code, 0, forked.stderr);
  const ids = (
    JSON.parse(forked.stdout.toString()) as { sandboxes: { id: string }[] }
  ).sandboxes.map((s) => s.id);
  assert.equal(ids.length, 3);
  const cat = await forkd(['exec', ids[0]!, '--', 'cat', '/tmp/w'], { env });
  assert.equal(cat.stdout.toString(), 'warm\n');
  const greet = await forkd(['exec', ids[1]!, '--', 'sh', '-c', 'echo $GREETING'], { env });
  assert.equal(greet.stdout.toString(), 'hello-oci\n');
  await forkd(['kill', ...ids], { env });
});
