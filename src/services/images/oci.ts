/**
 * OCI and Docker images as forkd images: resolve a manifest (an index or manifest list to
 * the platform), fetch or import its blobs into the layer cache (cache.ts), apply the
 * layers in order (layers.ts) and pack the tree with the one build pipeline (build.ts). The
 * image config becomes the image's `config` in image.json: the sandbox's defaults.
 */
import type { Paths } from '../../config.js';
import {
  chainCredentials,
  dockerCredentials,
  formatReference,
  isIndex,
  isManifest,
  layerCompression,
  manifestRef,
  parseReference,
  RegistryClient,
  type CredentialSource,
} from '../../drivers/registry/index.js';
import { asDiskFull } from '../disk-full.js';
import { ForkdError } from '../../errors.js';
import { buildImage, type BuildOptions } from './build.js';
import { addBlob, blobPath, hasBlob } from './cache.js';
import { applyFixups } from './fixups.js';
import { applyLayer, finishTree, layerStream, newTree } from './layers.js';
import { getImage, type Image, type ImageConfig, type ImageSource } from './store.js';
import { forkdCredentials } from './logins.js';

/** One progress event of a pull or import; `layer` events carry byte counts. */
export interface PullProgress {
  message: string;
  layer?: string;
  current?: number;
  total?: number;
}

export type PullProgressFn = (e: PullProgress) => void;

/** A descriptor in a manifest or index. */
export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: { os?: string; architecture?: string; variant?: string };
  annotations?: Record<string, string>;
}

interface Manifest {
  schemaVersion?: number;
  mediaType?: string;
  config?: Descriptor;
  layers?: Descriptor[];
  manifests?: Descriptor[];
}

/** What an image is made of, once resolved: the source of a build. */
export interface Resolved {
  digest: string;
  platform: string;
  config: ImageConfig;
  configDigest: string;
  layers: Descriptor[];
}

export interface PullOptions extends Partial<BuildOptions> {
  reference: string;
  /** `os/arch[/variant]`; default linux/amd64. */
  platform?: string;
  signal?: AbortSignal;
}

export const DEFAULT_PLATFORM = 'linux/amd64';

/** Where the daemon finds registry credentials: `forkd login`'s file, then Docker's. */
export function credentialsFor(p: Paths): CredentialSource {
  return chainCredentials(forkdCredentials(p), dockerCredentials);
}

/**
 * Pull `reference` into an image. An image of that name already built from the same
 * manifest digest is answered as it is (nothing is downloaded or built).
 */
export async function pullImage(
  p: Paths,
  opts: PullOptions,
  say: PullProgressFn = () => undefined,
): Promise<Image> {
  const ref = parseReference(opts.reference);
  const name = opts.name ?? defaultName(ref.repository);
  const client = new RegistryClient(ref.registry, {
    credentials: credentialsFor(p),
    signal: opts.signal,
  });
  say({ message: `resolving ${formatReference(ref)}` });
  const platform = opts.platform ?? DEFAULT_PLATFORM;
  const resolved = await resolveManifest(
    async (digestOrTag) => {
      const m = await client.getManifest(ref.repository, digestOrTag);
      return { ...m, json: parseJson(m.bytes, 'manifest') as Manifest };
    },
    (d) => client.getBlobBytes(ref.repository, d.digest, d.size),
    manifestRef(ref),
    platform,
  );
  const reuse = await sameImage(p, name, resolved.digest, opts.force);
  if (reuse) {
    say({ message: `image ${name} is already ${resolved.digest}` });
    return reuse;
  }
  await fetchLayers(p, resolved.layers, say, (d, tmp, onBytes) =>
    client.getBlob(ref.repository, d.digest, tmp, { size: d.size, onBytes }),
  ).catch(async (e: unknown) => {
    throw await asDiskFull(e, p.images, `image pull of ${formatReference(ref)}`);
  });
  const source = {
    kind: 'oci' as const,
    reference: formatReference({ ...ref, digest: undefined }),
    digest: resolved.digest,
    platform: resolved.platform,
    blobs: resolved.layers.map((l) => l.digest),
  };
  return buildFromLayers(p, { ...opts, name }, resolved, source, say);
}

/**
 * Follow a tag or digest to one image manifest (through an index, by platform), check
 * that every layer is a type forkd can apply, and read the config.
 */
export async function resolveManifest(
  getManifest: (ref: string) => Promise<{ mediaType: string; digest: string; json: Manifest }>,
  getConfig: (d: Descriptor) => Promise<Buffer>,
  ref: string,
  platform: string,
): Promise<Resolved> {
  let m = await getManifest(ref);
  if (isIndex(m.mediaType) || (m.json.manifests && !m.json.layers)) {
    const pick = pickPlatform(m.json.manifests ?? [], platform);
    m = await getManifest(pick.digest);
  }
  if (!isManifest(m.mediaType) && !(m.json.schemaVersion === 2 && m.json.layers)) {
    throw new ForkdError(
      'image_format_unsupported',
      `the manifest's media type ${JSON.stringify(m.mediaType)} is not an image manifest forkd reads ` +
        '(Docker v2 schema 2 or OCI)',
      { media_type: m.mediaType },
    );
  }
  const layers = m.json.layers ?? [];
  for (const l of layers) {
    if (layerCompression(l.mediaType) !== undefined) continue;
    throw new ForkdError(
      'image_format_unsupported',
      `layer ${l.digest} has the media type ${JSON.stringify(l.mediaType)}, which is no image layer ` +
        'forkd can apply (tar, tar+gzip or tar+zstd)',
      { media_type: l.mediaType, digest: l.digest },
    );
  }
  if (!m.json.config)
    throw new ForkdError('image_format_unsupported', 'the manifest has no config');
  const raw = parseJson(await getConfig(m.json.config), 'image config') as RawConfig;
  return {
    digest: m.digest,
    platform: [raw.os ?? 'linux', raw.architecture ?? 'amd64', raw.variant]
      .filter(Boolean)
      .join('/'),
    config: imageConfig(raw),
    configDigest: m.json.config.digest,
    layers,
  };
}

interface RawConfig {
  os?: string;
  architecture?: string;
  variant?: string;
  config?: {
    Env?: string[] | null;
    WorkingDir?: string;
    User?: string;
    Entrypoint?: string[] | null;
    Cmd?: string[] | null;
  };
  rootfs?: { diff_ids?: string[] };
}

/** The fields of an image config forkd uses as a sandbox's defaults. */
export function imageConfig(raw: RawConfig): ImageConfig {
  const c = raw.config ?? {};
  const out: ImageConfig = { env: c.Env ?? [] };
  if (c.WorkingDir) out.working_dir = c.WorkingDir;
  if (c.User) out.user = c.User;
  if (c.Entrypoint?.length) out.entrypoint = c.Entrypoint;
  if (c.Cmd?.length) out.cmd = c.Cmd;
  return out;
}

/** The manifest of an index for `os/arch[/variant]`. */
export function pickPlatform(manifests: Descriptor[], platform: string): Descriptor {
  const [os, arch, variant] = platform.split('/');
  const found = manifests.find(
    (d) =>
      d.platform?.os === os &&
      d.platform?.architecture === arch &&
      (!variant || d.platform?.variant === variant),
  );
  if (found) return found;
  const have = manifests.map((d) =>
    [d.platform?.os, d.platform?.architecture, d.platform?.variant].filter(Boolean).join('/'),
  );
  throw new ForkdError(
    'image_format_unsupported',
    `the image has no ${platform} variant (it has: ${have.join(', ') || 'none'}): pass --platform`,
    { platform, platforms: have },
  );
}

/** Bring every layer into the cache (those already there are skipped), with progress. */
export async function fetchLayers(
  p: Paths,
  layers: Descriptor[],
  say: PullProgressFn,
  fetchOne: (d: Descriptor, tmp: string, onBytes: (n: number) => void) => Promise<void>,
): Promise<void> {
  const total = layers.reduce((a, l) => a + l.size, 0);
  say({ message: `${layers.length} layers, ${mib(total)}` });
  for (const [i, l] of layers.entries()) {
    const short = l.digest.slice(7, 19);
    if (await hasBlob(p, l.digest)) {
      say({
        message: `layer ${i + 1}/${layers.length} ${short} cached`,
        layer: l.digest,
        current: l.size,
        total: l.size,
      });
      continue;
    }
    let got = 0;
    let last = 0;
    await addBlob(p, l.digest, (tmp) =>
      fetchOne(l, tmp, (n) => {
        got += n;
        if (got - last < 1 << 20 && got !== l.size) return;
        last = got;
        say({
          message: `layer ${i + 1}/${layers.length} ${short}`,
          layer: l.digest,
          current: got,
          total: l.size,
        });
      }),
    );
    say({
      message: `layer ${i + 1}/${layers.length} ${short} done`,
      layer: l.digest,
      current: l.size,
      total: l.size,
    });
  }
}

/** Apply the cached layers in order into a tree and build the image from it. */
export async function buildFromLayers(
  p: Paths,
  opts: Partial<BuildOptions> & { name: string },
  resolved: Resolved,
  source: Extract<ImageSource, { kind: 'oci' | 'archive' }>,
  say: PullProgressFn,
): Promise<Image> {
  let tree: ReturnType<typeof newTree> | undefined;
  return buildImage(
    p,
    { name: opts.name, sizeMiB: opts.sizeMiB, force: opts.force },
    source,
    async (root) => {
      const { mkdir } = await import('node:fs/promises');
      await mkdir(root, { mode: 0o755 });
      tree = newTree(root);
      for (const [i, l] of resolved.layers.entries()) {
        say({ message: `applying layer ${i + 1}/${resolved.layers.length}` });
        await applyLayer(tree, await layerStream(blobPath(p, l.digest)));
      }
      await finishTree(tree);
    },
    (line) => say({ message: line }),
    {
      config: resolved.config,
      afterMkfs: async (rootfs, scratch) => {
        if (tree) await applyFixups(rootfs, tree.fixups, scratch);
      },
    },
  );
}

/** An existing image built from this digest is reused unless forced. */
async function sameImage(
  p: Paths,
  name: string,
  digest: string,
  force?: boolean,
): Promise<Image | undefined> {
  if (force) return undefined;
  const existing = await getImage(p, name).catch(() => undefined);
  return (existing?.source as { digest?: string } | undefined)?.digest === digest
    ? existing
    : undefined;
}

/** `team/app` → `app`, kept to the name rule. */
export function defaultName(repository: string): string {
  const last = repository.split('/').pop() ?? 'image';
  return last.replace(/[^a-z0-9._-]/g, '-').slice(0, 63) || 'image';
}

function parseJson(bytes: Buffer, what: string): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new ForkdError('image_format_unsupported', `the ${what} is not JSON`);
  }
}

function mib(bytes: number): string {
  return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
}
