/**
 * A real registry for the image tests: Debian's `docker-registry` on 127.0.0.1 at a free
 * port, plain, with htpasswd basic auth, or with token auth (a small token server here
 * signs the JWTs the registry checks against a self-signed certificate). Its request log is
 * kept, so a test can count blob downloads. Test images are OCI layouts written from local
 * directories with GNU tar and sha256, then pushed with forkd's own registry client.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, createSign, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile, mkdir, copyFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RegistryClient, MEDIA } from '../../../src/drivers/registry/index.js';
import { run } from '../../../src/util/exec.js';
import { selfSignedCert } from '../../helpers/certs.js';
import { freePort } from '../../helpers/ports.js';

export interface TestRegistry {
  host: string;
  /** Its storage root (tests corrupt blobs there). */
  dataDir: string;
  /** Lines the registry logged so far. */
  log(): string;
  stop(): Promise<void>;
}

export type AuthMode =
  | { kind: 'none' }
  | { kind: 'basic'; user: string; password: string }
  | { kind: 'token'; user: string; password: string };

/** Start a registry (and a token server for token auth); `stop` ends both and removes its files. */
export async function startRegistry(auth: AuthMode = { kind: 'none' }): Promise<TestRegistry> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-registry-'));
  const port = await freePort();
  let token: Server | undefined;
  let authYaml = '';
  if (auth.kind === 'basic') {
    await run('htpasswd', ['-Bbc', join(dir, 'htpasswd'), auth.user, auth.password]);
    authYaml = `auth:\n  htpasswd:\n    realm: forkd-test\n    path: ${join(dir, 'htpasswd')}\n`;
  } else if (auth.kind === 'token') {
    const t = await startTokenServer(dir, auth.user, auth.password);
    token = t.server;
    authYaml =
      `auth:\n  token:\n    realm: ${t.realm}\n    service: forkd-test\n    issuer: forkd-test-issuer\n` +
      `    rootcertbundle: ${t.certFile}\n`;
  }
  const config =
    `version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n` +
    `storage:\n  filesystem:\n    rootdirectory: ${join(dir, 'data')}\n  delete:\n    enabled: true\n` +
    `http:\n  addr: 127.0.0.1:${port}\n${authYaml}`;
  await writeFile(join(dir, 'config.yml'), config);
  const child: ChildProcess = spawn('docker-registry', ['serve', join(dir, 'config.yml')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout!.on('data', (d: Buffer) => (log += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  const host = `127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    const up = await fetch(`http://${host}/v2/`).then(
      () => true,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline || child.exitCode !== null) {
      child.kill();
      throw new Error(`docker-registry did not start: ${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    host,
    dataDir: join(dir, 'data'),
    log: () => log,
    stop: async () => {
      if (child.exitCode === null) {
        child.kill();
        await new Promise((r) => child.once('exit', r));
      }
      if (token) await new Promise((r) => token!.close(r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A token server: basic-auth checked, answers an RS256 JWT with the scope asked. */
async function startTokenServer(dir: string, user: string, password: string) {
  const { key, cert: certFile } = await selfSignedCert(dir, 'forkd-test-token', {
    name: 'token',
  });
  const pem = await readFile(key, 'utf8');
  const der = (await readFile(certFile, 'utf8')).replace(/-----[^-]+-----|\s/g, '');
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const expected = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
    if (req.headers.authorization !== expected) {
      res.writeHead(401).end('{"details":"bad credentials"}');
      return;
    }
    const access = url.searchParams.getAll('scope').map((s) => {
      const [type, name, actions] = s.split(':');
      return { type, name, actions: (actions ?? '').split(',') };
    });
    const now = Math.floor(Date.now() / 1000);
    const head = b64({ alg: 'RS256', typ: 'JWT', x5c: [der] });
    const body = b64({
      iss: 'forkd-test-issuer',
      sub: user,
      aud: 'forkd-test',
      exp: now + 300,
      nbf: now - 10,
      iat: now,
      jti: randomBytes(8).toString('hex'),
      access,
    });
    const sig = createSign('RSA-SHA256').update(`${head}.${body}`).sign(pem).toString('base64url');
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ token: `${head}.${body}.${sig}` }));
  });
  server.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const realm = `http://127.0.0.1:${(server.address() as AddressInfo).port}/token`;
  return { server, realm, certFile };
}

/** One layer from a directory: tar (pax, numeric owners, xattrs) then compressed. */
export async function layerFromDir(
  dir: string,
  out: string,
  compression: 'none' | 'gzip' | 'zstd',
) {
  const tar = `${out}.tar`;
  await run('tar', [
    '--xattrs',
    '--xattrs-include=security.*',
    '--numeric-owner',
    '--format=pax',
    '--sort=name',
    '-C',
    dir,
    '-cf',
    tar,
    '.',
  ]);
  const diffId = await digestOf(tar);
  let file = tar;
  if (compression === 'gzip') {
    await run('gzip', ['-n', '-k', tar]);
    file = `${tar}.gz`;
  } else if (compression === 'zstd') {
    await run('zstd', ['-q', '-k', tar, '-o', `${tar}.zst`]);
    file = `${tar}.zst`;
  }
  const mediaType =
    compression === 'none'
      ? 'application/vnd.oci.image.layer.v1.tar'
      : `application/vnd.oci.image.layer.v1.tar+${compression}`;
  return { file, diffId, digest: await digestOf(file), size: (await stat(file)).size, mediaType };
}

export type Layer = Awaited<ReturnType<typeof layerFromDir>>;

export async function digestOf(file: string): Promise<string> {
  return `sha256:${createHash('sha256')
    .update(await readFile(file))
    .digest('hex')}`;
}

export interface BuiltImage {
  config: Buffer;
  manifest: Buffer;
  manifestDigest: string;
  layers: Layer[];
}

/** An OCI image (config + manifest) over layers. */
export function ociImage(
  layers: Layer[],
  cfg: Record<string, unknown>,
  arch = 'amd64',
): BuiltImage {
  const config = Buffer.from(
    JSON.stringify({
      architecture: arch,
      os: 'linux',
      config: cfg,
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
    }),
  );
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA.ociManifest,
      config: { mediaType: MEDIA.ociConfig, digest: sha(config), size: config.length },
      layers: layers.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.size })),
    }),
  );
  return { config, manifest, manifestDigest: sha(manifest), layers };
}

export function sha(b: Buffer): string {
  return `sha256:${createHash('sha256').update(b).digest('hex')}`;
}

/** Push an image under `repo:tag` with forkd's client. */
export async function push(
  client: RegistryClient,
  repo: string,
  tag: string,
  img: BuiltImage,
  scratch: string,
) {
  for (const l of img.layers) await client.putBlob(repo, l.digest, l.file, l.size);
  const cfgFile = join(scratch, `cfg-${sha(img.config).slice(7, 19)}`);
  await writeFile(cfgFile, img.config);
  await client.putBlob(repo, sha(img.config), cfgFile, img.config.length);
  await client.putManifest(repo, tag, MEDIA.ociManifest, img.manifest);
}

/** An OCI image layout directory holding `img` (tagged `ref`). */
export async function writeLayout(dir: string, img: BuiltImage, ref: string): Promise<void> {
  const blobs = join(dir, 'blobs', 'sha256');
  await mkdir(blobs, { recursive: true });
  for (const l of img.layers) await copyFile(l.file, join(blobs, l.digest.slice(7)));
  await writeFile(join(blobs, sha(img.config).slice(7)), img.config);
  await writeFile(join(blobs, img.manifestDigest.slice(7)), img.manifest);
  await writeFile(join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  const index = {
    schemaVersion: 2,
    manifests: [
      {
        mediaType: MEDIA.ociManifest,
        digest: img.manifestDigest,
        size: img.manifest.length,
        annotations: { 'org.opencontainers.image.ref.name': ref },
      },
    ],
  };
  await writeFile(join(dir, 'index.json'), JSON.stringify(index));
}

/** A `docker save` archive directory: manifest.json, config, uncompressed layer tars. */
export async function writeDockerSave(
  dir: string,
  img: BuiltImage,
  repoTag: string,
): Promise<void> {
  await mkdir(dir, { recursive: true });
  const layers: string[] = [];
  for (const [i, l] of img.layers.entries()) {
    const rel = `l${i}/layer.tar`;
    await mkdir(join(dir, `l${i}`));
    const tar = l.file.replace(/\.(gz|zst)$/, '');
    await copyFile(tar, join(dir, rel));
    layers.push(rel);
  }
  const cfgName = `${sha(img.config).slice(7)}.json`;
  await writeFile(join(dir, cfgName), img.config);
  await writeFile(
    join(dir, 'manifest.json'),
    JSON.stringify([{ Config: cfgName, RepoTags: [repoTag], Layers: layers }]),
  );
}
