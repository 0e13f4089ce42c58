/**
 * `forkd image import`: an OCI image layout (a directory, or a tar of one) or a `docker
 * save` archive, no registry involved. A tar is unpacked to a scratch directory first;
 * every blob is then checked against its digest on its way into the layer cache, so an
 * import and a pull of the same image share layers and build the same tree.
 */
import { mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { createReadStream } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createHash } from 'node:crypto';
import type { Paths } from '../../config.js';
import { sha256 } from '../../drivers/registry/index.js';
import { ForkdError } from '../../errors.js';
import type { BuildOptions } from './build.js';
import { addBlobFromFile } from './cache.js';
import { clean } from './layers.js';
import {
  buildFromLayers,
  defaultName,
  fetchLayers,
  imageConfig,
  resolveManifest,
  DEFAULT_PLATFORM,
  type Descriptor,
  type PullProgressFn,
} from './oci.js';
import { readTar } from './tar.js';
import type { Image } from './store.js';
import { fileSink } from '../../util/file-sink.js';

const DOCKER_LAYER = 'application/vnd.docker.image.rootfs.diff.tar';

export interface ImportOptions extends Partial<BuildOptions> {
  /** An OCI layout directory, or a tar file (OCI layout or `docker save`). */
  path: string;
  /** Which image of a multi-image archive: its tag (`app:1`) or ref name annotation. */
  ref?: string;
  platform?: string;
}

/** Import an archive or layout directory into an image. */
export async function importImage(
  p: Paths,
  opts: ImportOptions,
  say: PullProgressFn = () => undefined,
): Promise<Image> {
  const path = resolve(opts.path);
  const st = await stat(path).catch(() => undefined);
  if (!st)
    throw new ForkdError(
      'bad_request',
      `${path} does not exist: pass an OCI layout directory or an image tar`,
      { path },
    );
  let scratch: string | undefined;
  try {
    let dir = path;
    if (!st.isDirectory()) {
      await mkdir(join(p.home, 'cache'), { recursive: true });
      scratch = await mkdtemp(join(p.home, 'cache', 'import-'));
      say({ message: `unpacking ${path}` });
      await unpackArchive(path, scratch);
      dir = scratch;
    }
    const layout = await exists(join(dir, 'index.json'));
    if (layout) return await importLayout(p, dir, path, opts, say);
    if (await exists(join(dir, 'manifest.json')))
      return await importDockerSave(p, dir, path, opts, say);
    throw new ForkdError(
      'image_format_unsupported',
      `${path} is neither an OCI image layout (no index.json) nor a \`docker save\` archive (no manifest.json)`,
      { path },
    );
  } finally {
    if (scratch) await rm(scratch, { recursive: true, force: true });
  }
}

async function importLayout(
  p: Paths,
  dir: string,
  file: string,
  opts: ImportOptions,
  say: PullProgressFn,
): Promise<Image> {
  const blob = (digest: string) =>
    join(dir, 'blobs', 'sha256', digest.replace(/^sha256:/, '').replace(/[^a-f0-9]/g, ''));
  const index = JSON.parse(await readFile(join(dir, 'index.json'), 'utf8')) as {
    manifests?: Descriptor[];
  };
  const manifests = index.manifests ?? [];
  const wanted = opts.ref
    ? manifests.filter((m) => refName(m) === opts.ref || refName(m) === opts.ref!.split(':').pop())
    : manifests;
  const top = wanted[0];
  if (!top) {
    throw new ForkdError(
      'reference_not_found',
      `${file} has no image ${opts.ref ?? ''}`.trim() + ': list its index.json',
      { ref: opts.ref },
    );
  }
  const readBlob = async (d: { digest: string; size?: number }) => {
    const bytes = await readFile(blob(d.digest)).catch(() => {
      throw new ForkdError('blob_invalid', `${file} lacks blob ${d.digest}`, { digest: d.digest });
    });
    if (sha256(bytes) !== d.digest)
      throw new ForkdError(
        'blob_invalid',
        `blob ${d.digest} in ${file} does not match its digest`,
        { digest: d.digest },
      );
    return bytes;
  };
  // The top entry is an index entry, i.e. a descriptor: resolve from its digest.
  const sizes = new Map(manifests.map((m) => [m.digest, m.mediaType]));
  const resolved = await resolveManifest(
    async (digest) => {
      const bytes = await readBlob({ digest });
      const json = JSON.parse(bytes.toString('utf8')) as { mediaType?: string };
      return { mediaType: json.mediaType ?? sizes.get(digest) ?? '', digest, json };
    },
    readBlob,
    top.digest,
    opts.platform ?? DEFAULT_PLATFORM,
  );
  await fetchLayers(p, resolved.layers, say, async (d, tmp) => {
    const { verifier } = await import('../../drivers/registry/index.js');
    const sink = await fileSink(tmp, 'wx'); // before the source exists: see fileSink
    await pipeline(createReadStream(blob(d.digest)), verifier(d.digest, d.size), sink);
  });
  const name = opts.name ?? nameFrom(refName(top), file);
  const source = {
    kind: 'archive' as const,
    file,
    format: 'oci-layout' as const,
    digest: resolved.digest,
    platform: resolved.platform,
    blobs: resolved.layers.map((l) => l.digest),
  };
  return buildFromLayers(p, { ...opts, name }, resolved, source, say);
}

interface SaveEntry {
  Config: string;
  RepoTags?: string[] | null;
  Layers: string[];
}

/** `docker save`: manifest.json names the config and the (uncompressed) layer tars. */
async function importDockerSave(
  p: Paths,
  dir: string,
  file: string,
  opts: ImportOptions,
  say: PullProgressFn,
): Promise<Image> {
  const entries = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as SaveEntry[];
  const entry = opts.ref
    ? entries.find((e) => e.RepoTags?.some((t) => t === opts.ref || t.endsWith(`/${opts.ref}`)))
    : entries[0];
  if (!entry)
    throw new ForkdError('reference_not_found', `${file} has no image ${opts.ref ?? ''}`.trim(), {
      ref: opts.ref,
    });
  const inside = (rel: string) => join(dir, clean(rel));
  const configBytes = await readFile(inside(entry.Config));
  const raw = JSON.parse(configBytes.toString('utf8')) as Parameters<typeof imageConfig>[0];
  const diffIds = raw.rootfs?.diff_ids ?? [];
  const layers: Descriptor[] = [];
  for (const [i, rel] of entry.Layers.entries()) {
    const path = inside(rel);
    const digest = await fileDigest(path);
    // The config names each layer by the digest of its uncompressed tar: they must agree.
    if (diffIds[i] && diffIds[i] !== digest) {
      throw new ForkdError(
        'blob_invalid',
        `layer ${rel} in ${file} does not match the config's diff_id ${diffIds[i]}`,
        { layer: rel },
      );
    }
    layers.push({ mediaType: DOCKER_LAYER, digest, size: (await stat(path)).size });
    await addBlobFromFile(p, digest, path);
  }
  say({ message: `${layers.length} layers imported` });
  const name = opts.name ?? nameFrom(entry.RepoTags?.[0]?.replace(/:[^:/]*$/, ''), file);
  const resolved = {
    digest: sha256(configBytes),
    platform: [raw.os ?? 'linux', raw.architecture ?? 'amd64'].join('/'),
    config: imageConfig(raw),
    configDigest: sha256(configBytes),
    layers,
  };
  const source = {
    kind: 'archive' as const,
    file,
    format: 'docker-save' as const,
    digest: resolved.digest,
    platform: resolved.platform,
    blobs: layers.map((l) => l.digest),
  };
  return buildFromLayers(p, { ...opts, name }, resolved, source, say);
}

function refName(d: Descriptor): string | undefined {
  return d.annotations?.['org.opencontainers.image.ref.name'];
}

function nameFrom(ref: string | undefined, file: string): string {
  if (ref) return defaultName(ref);
  throw new ForkdError('bad_request', `${file} does not name its image: pass --name`, { file });
}

/** Unpack a tar's regular files (an archive holds only those) below `dir`. */
async function unpackArchive(file: string, dir: string): Promise<void> {
  await readTar(createReadStream(file), async (h, body) => {
    if (h.type !== 'file') return;
    const dest = join(dir, clean(h.path));
    await mkdir(dirname(dest), { recursive: true });
    await pipeline(body, await fileSink(dest, 'wx'));
  });
}

async function fileDigest(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return `sha256:${hash.digest('hex')}`;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}
