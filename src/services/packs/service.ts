/**
 * The pack service: `pack` (a snapshot, its chain and its image into one tar+zstd file),
 * `unpack` (verify all of a pack, then install it), `push` and `pull` (the same content as
 * an OCI artifact through any registry, with the image pulls' client and credentials), and
 * a pull of a pack file by URL. Every install goes through one path (install.ts): checked
 * in full in a staging dir, then renamed into place; nothing is installed on any refusal.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Paths } from '../../config.js';
import type {
  CacheInfoT,
  PackResultT,
  CachePruneResultT,
  PullSnapshotT,
  PushResultT,
  UnpackResultT,
} from '../../contract/schemas.js';
import {
  formatReference,
  manifestRef,
  parseReference,
  RegistryClient,
  sha256,
} from '../../drivers/registry/index.js';
import { ForkdError } from '../../errors.js';
import { crashPoint } from '../../util/crash.js';
import type { PackService } from '../contracts.js';
import { asDiskFull } from '../disk-full.js';
import { credentialsFor } from '../images/oci.js';
import type { SnapshotManager } from '../snapshots/service.js';
import { extractMembers, readMember, verifyExtracted, writeArchive } from './archive.js';
import { collectPack } from './collect.js';
import { installPack, reusable, sameContentHere, stagedManifests, type Origin } from './install.js';
import { cacheLimit, NodeCache } from './cache.js';
import { ReferenceSnapshots, type Ensured } from './references.js';
import { pullChunkedFile, pushChunkedFile, type ChunkPush } from './chunked.js';
import { chunkBytes } from './chunks.js';
import {
  checkPackManifest,
  CHUNKED_FORMAT_VERSION,
  hostProblem,
  PACK_FORMAT_VERSION,
  PACK_MANIFEST,
  PACK_MEDIA,
  snapshotPath,
  type PackFile,
  type PackManifest,
} from './manifest.js';
import {
  artifactManifest,
  cleanWork,
  layerFor,
  layersByPath,
  makeWork,
  mountSources,
  packCache,
  parseArtifact,
  readIndex,
  remember,
  sweepDeadWork,
  writeIndex,
  type Layer,
} from './oci.js';
import { downloadUrl } from './url.js';
import { vmm } from '../vmm.js';

/** How a push stores files: as chunks (format 2, the default) or one blob per file (1). */
export interface PushOptions {
  format?: 'chunks' | 'files';
}

export interface PackServiceOptions {
  paths: Paths;
  snapshots: SnapshotManager;
  qemuVersion: () => Promise<string>;
  /** The node cache's limit in bytes (default FORKD_CACHE_MIB). */
  cacheLimit?: number;
}

type Progress = (message: string) => void;
const quiet: Progress = () => undefined;

export class PackManager implements PackService {
  /** Chunks and snapshots pulled by reference, shared by every reference (cache.ts). */
  readonly cache: NodeCache;

  /** Snapshots by OCI reference: the first fork of one pulls it (references.ts). */
  readonly references: ReferenceSnapshots;

  constructor(private readonly opts: PackServiceOptions) {
    this.cache = new NodeCache(opts.paths);
    this.references = new ReferenceSnapshots({
      paths: opts.paths,
      cache: this.cache,
      snapshots: opts.snapshots,
      resolve: async (reference, signal) => {
        const ref = parseReference(reference);
        return (
          await this.client(ref.registry, signal).getManifest(ref.repository, manifestRef(ref))
        ).digest;
      },
      pull: (reference, signal) => this.pull({ reference }, quiet, signal, true),
      limit: () => this.cacheLimit(),
    });
  }

  /**
   * The local tag of the snapshot REF names, pulled (with what its chain lacks) when this
   * node has not got it; concurrent calls for one reference share one pull. The containerd
   * shim's `forkd.dev/snapshot` annotation and a fork by reference both come here.
   */
  ensure(reference: string, signal?: AbortSignal): Promise<Ensured> {
    return this.references.ensure(reference, { signal });
  }

  /** `forkd pull --prefetch`: ask the registry where REF points now and have it here. */
  prefetch(reference: string, signal?: AbortSignal): Promise<Ensured> {
    return this.references.ensure(reference, { refresh: true, signal });
  }

  private get paths() {
    return this.opts.paths;
  }

  /**
   * Sweep what a daemon killed mid-push or mid-pack left in the pack cache (its work dir).
   * A pull's staging dir is among the snapshots' and goes with theirs. Call once before serving.
   */
  async start(): Promise<void> {
    await sweepDeadWork(this.paths);
  }

  /** Write TAG's pack to `file` (a temp name beside it, renamed when complete). */
  async pack(tag: string, file: string, onProgress: Progress = quiet): Promise<PackResultT> {
    const m = await this.opts.snapshots.registry.bootable(tag);
    onProgress(`hashing the files of ${tag} and its chain`);
    const pack = await collectPack(this.paths, m);
    const work = await this.workDir();
    const tmp = join(dirname(file), `.${PACK_MANIFEST}.${randomBytes(4).toString('hex')}.tmp`);
    try {
      await writeFile(join(work, PACK_MANIFEST), JSON.stringify(pack, null, 2) + '\n');
      onProgress(`writing ${pack.files.length} files to ${file}`);
      const members = pack.files.map((f) => f.path);
      await writeArchive(
        [
          { dir: work, members: [PACK_MANIFEST] },
          { dir: this.paths.home, members },
        ],
        tmp,
      );
      await rename(tmp, file);
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    } finally {
      await cleanWork(work);
    }
    return { tag, file, bytes: (await stat(file)).size, ...summary(pack) };
  }

  /** Verify a pack file in full and install it (its chain, its image). */
  async unpack(
    file: string,
    opts: { tag?: string; force?: boolean } = {},
    onProgress: Progress = quiet,
    origin?: Origin,
  ): Promise<UnpackResultT> {
    const text = await readMember(file, PACK_MANIFEST);
    if (text === undefined) {
      await stat(file).catch(() => {
        throw new ForkdError('bad_request', `no pack file ${file}`, { file });
      });
      throw checkPackManifest(undefined); // not a pack: throws pack_invalid
    }
    const pack = checkPackManifest(JSON.parse(text));
    await this.checkHost(pack, opts);
    const staging = await this.staging();
    try {
      onProgress(`extracting ${pack.files.length} files`);
      await extractMembers(
        file,
        staging,
        pack.files.map((f) => f.path),
      );
      onProgress('verifying every file against the pack manifest');
      await verifyExtracted(staging, pack.files);
      const from = origin ?? { kind: 'pack', from: file, at: new Date().toISOString() };
      const done = await installPack(this.installContext(), staging, pack, opts, from);
      return { ...done, bytes_downloaded: 0, bytes_resumed: 0 };
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }

  /** Push TAG as an artifact under REF: only blobs the registry lacks are uploaded. */
  async push(
    tag: string,
    reference: string,
    onProgress: Progress = quiet,
    signal?: AbortSignal,
    opts: PushOptions = {},
  ): Promise<PushResultT> {
    return this.spaceChecked(`pack push of ${tag}`, () =>
      this.pushing(tag, reference, onProgress, signal, opts.format ?? 'chunks'),
    );
  }

  private async pushing(
    tag: string,
    reference: string,
    onProgress: Progress,
    signal: AbortSignal | undefined,
    format: 'chunks' | 'files',
  ): Promise<PushResultT> {
    const ref = parseReference(reference);
    const m = await this.opts.snapshots.registry.bootable(tag);
    const pack = await collectPack(this.paths, m);
    const client = this.client(ref.registry, signal);
    const repo = ref.repository;
    const here = `${ref.registry}/${repo}`;
    const index = await readIndex(this.paths);
    const work = await this.workDir();
    const out: PushResultT = {
      reference: '',
      digest: '',
      blobs: pack.files.length + 1,
      uploaded: 0,
      skipped: 0,
      mounted: 0,
      bytes_uploaded: 0,
    };
    const chunkSize = chunkBytes();
    const chunked: ChunkPush = { client, repo, registry: ref.registry, index, chunkSize, out };
    try {
      const layers: Layer[] = [];
      for (const f of pack.files) {
        if (format === 'chunks') {
          onProgress(`${f.path}: ${f.allocated} bytes in ${chunkSize >> 20} MiB chunks`);
          const before = out.bytes_uploaded;
          layers.push(...(await pushChunkedFile(chunked, this.paths.home, f)));
          onProgress(`${f.path}: ${out.bytes_uploaded - before} bytes uploaded`);
          continue;
        }
        const sources = (d: string) => mountSources(index, d, ref.registry);
        const { layer, file } = await layerFor(
          this.paths,
          index,
          f,
          work,
          async (d) => (await client.hasBlob(repo, d)) || sources(d).length > 0,
        );
        onProgress(`${f.path}: ${layer.size} bytes`);
        const how = await client.pushBlob(repo, layer.digest, file ?? '', layer.size, {
          mountFrom: sources(layer.digest),
          onBytes: (n) => (out.bytes_uploaded += n),
        });
        if (how === 'uploaded' && !file) throw new Error(`no blob file for ${f.path}`);
        count(out, how);
        onProgress(`${f.path}: ${how}`);
        remember(index, layer.digest, here);
        layers.push(layer);
      }
      const config = Buffer.from(
        JSON.stringify(
          format === 'chunks'
            ? { ...pack, format_version: CHUNKED_FORMAT_VERSION, chunk_size: chunkSize }
            : pack,
        ),
      );
      out.blobs = new Set(layers.map((l) => l.digest)).size + 1;
      const configFile = join(work, 'config.json');
      await writeFile(configFile, config);
      const configDigest = sha256(config);
      count(out, await client.pushBlob(repo, configDigest, configFile, config.length));
      crashPoint('pack:blobs-pushed');
      const manifest = artifactManifest(
        { digest: configDigest, size: config.length },
        uniqueLayers(layers),
        pack.created_at,
      );
      out.digest = await client.putManifest(
        repo,
        ref.tag ?? 'latest',
        'application/vnd.oci.image.manifest.v1+json',
        manifest,
      );
      out.reference = `${formatReference({ ...ref, digest: undefined })}@${out.digest}`;
      await writeIndex(this.paths, index);
      return out;
    } finally {
      await cleanWork(work);
    }
  }

  /** Pull a pushed snapshot (or a pack file by https URL) and install it with its chain. */
  async pull(
    req: PullSnapshotT,
    onProgress: Progress = quiet,
    signal?: AbortSignal,
    byContent = false,
  ): Promise<UnpackResultT> {
    if (req.prefetch) return this.prefetching(req, onProgress, signal);
    return this.spaceChecked(`pull of ${req.reference}`, () =>
      this.pulling(req, onProgress, signal, byContent),
    );
  }

  /** `pull --prefetch`: what the first fork of the reference would pull, ready before it. */
  private async prefetching(
    req: PullSnapshotT,
    onProgress: Progress,
    signal?: AbortSignal,
  ): Promise<UnpackResultT> {
    if (req.tag !== undefined || req.force !== undefined || /^https?:/.test(req.reference)) {
      throw new ForkdError(
        'bad_request',
        'prefetch takes a registry reference alone (no tag, force or URL): forks by reference name it',
        { field: 'body.prefetch' },
      );
    }
    onProgress(`prefetching ${req.reference}`);
    const got = await this.references.ensure(req.reference, { refresh: true, signal });
    if (got.result) return got.result;
    return {
      tag: got.tag,
      installed: [],
      reused: [got.tag],
      image: null,
      bytes_downloaded: 0,
      bytes_resumed: 0,
    };
  }

  /** The node cache: entries (least recently used first), size, limit, counters. */
  async cacheInfo(): Promise<CacheInfoT> {
    const entries = await this.references.list();
    const limit = this.cacheLimit();
    return {
      entries,
      bytes: entries.reduce((a, e) => a + e.bytes, 0),
      limit_bytes: Number.isFinite(limit) ? limit : null,
      ...this.cache.stats,
    };
  }

  /** Evict down to the limit, or (`all`) everything no sandbox or snapshot needs. */
  async pruneCache(opts: { all?: boolean } = {}): Promise<CachePruneResultT> {
    if (opts.all) await this.cache.removePartials();
    const { removed, kept } = await this.references.trim(opts.all ? 0 : this.cacheLimit());
    return { removed, bytes: kept };
  }

  private cacheLimit(): number {
    return this.opts.cacheLimit ?? cacheLimit();
  }

  private async pulling(
    req: PullSnapshotT,
    onProgress: Progress,
    signal: AbortSignal | undefined,
    byContent: boolean,
  ): Promise<UnpackResultT> {
    const opts = { tag: req.tag, force: req.force, byContent };
    if (/^https?:\/\//.test(req.reference)) {
      const got = await downloadUrl(this.paths, req.reference, onProgress, signal);
      const origin: Origin = { kind: 'url', from: req.reference, digest: got.sha256, at: now() };
      const done = await this.unpack(got.file, opts, onProgress, origin);
      await rm(got.file, { force: true });
      return { ...done, bytes_downloaded: got.bytes, bytes_resumed: got.resumed };
    }
    const ref = parseReference(req.reference);
    const client = this.client(ref.registry, signal);
    const repo = ref.repository;
    const fetched = await client.getManifest(repo, manifestRef(ref));
    const artifact = parseArtifact(fetched.bytes);
    if (!artifact) {
      throw new ForkdError(
        'pack_invalid',
        `${req.reference} is not a forkd snapshot (its config is not ${PACK_MEDIA.config}): pull images with \`forkd image pull\``,
        { reference: req.reference },
      );
    }
    const pack = checkPackManifest(
      JSON.parse((await client.getBlobBytes(repo, artifact.config.digest)).toString('utf8')),
      [PACK_FORMAT_VERSION, CHUNKED_FORMAT_VERSION],
    );
    await this.checkHost(pack, opts);
    const byPath = layersByPath(artifact);
    const staging = await this.staging();
    const blobs = join(packCache(this.paths), 'blobs');
    await mkdir(blobs, { recursive: true });
    const stats = { bytes_downloaded: 0, bytes_resumed: 0 };
    const onBytes = (n: number) => (stats.bytes_downloaded += n);
    const cached = { client, repo, cache: this.cache, staging, onBytes };
    const fetch = async (path: string) => {
      const layer = byPath.get(path);
      if (!layer)
        throw new ForkdError(
          'pack_invalid',
          `${req.reference} lacks a layer for ${path} (a parent layer is missing): push it again`,
          { file: path },
        );
      if (pack.format_version === CHUNKED_FORMAT_VERSION) {
        onProgress(`${path}: chunks`);
        await pullChunkedFile(cached, layer, pack.files.find((f) => f.path === path) as PackFile);
        return;
      }
      const blob = join(blobs, layer.digest.slice(7));
      onProgress(`${path}: ${layer.size} bytes`);
      const got = await client.getBlobResumable(repo, layer.digest, blob, {
        size: layer.size,
        onBytes: (n) => (stats.bytes_downloaded += n),
      });
      stats.bytes_resumed += got.resumedBytes;
      await extractMembers(blob, staging, [path]);
      await rm(blob, { force: true });
    };
    try {
      const manifests = pack.files.filter(
        (f) => f.path.endsWith('/manifest.json') && f.path.startsWith('snapshots/'),
      );
      for (const f of manifests) await fetch(f.path);
      await verifyExtracted(staging, manifests);
      const staged = await stagedManifests(staging, pack);
      const snapshots = this.opts.snapshots.registry;
      const reuse = byContent
        ? new Set((await sameContentHere(snapshots, pack, staged)).keys())
        : await reusable(this.paths, snapshots, pack, staged);
      const skip = (path: string) => [...reuse].some((t) => path.startsWith(snapshotPath(t, '')));
      const needed = pack.files.filter((f) => !manifests.includes(f) && !skip(f.path));
      for (const f of needed) await fetch(f.path);
      await verifyExtracted(staging, needed);
      const index = await readIndex(this.paths);
      for (const l of artifact.layers) remember(index, l.digest, `${ref.registry}/${repo}`);
      await writeIndex(this.paths, index);
      const origin: Origin = {
        kind: 'registry',
        from: formatReference({ ...ref, digest: undefined }),
        digest: fetched.digest,
        at: now(),
      };
      const done = await installPack(this.installContext(), staging, pack, opts, origin);
      return { ...done, ...stats };
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }

  /** `pack_incompatible` when this host cannot restore the pack; name_taken before any download. */
  private async checkHost(
    pack: PackManifest,
    opts: { tag?: string; force?: boolean; byContent?: boolean },
  ) {
    const here = { qemu: await this.opts.qemuVersion(), accel: (await vmm().accel()).accel };
    const why = await hostProblem(pack.host, here);
    if (why) {
      throw new ForkdError(
        'pack_incompatible',
        `this host cannot restore snapshot "${pack.tag}": ${why}; nothing was installed`,
        {
          tag: pack.tag,
          needs: pack.host,
        },
      );
    }
    const top = opts.tag ?? pack.tag;
    if (!opts.force && !opts.byContent && this.opts.snapshots.registry.isPublished(top)) {
      throw new ForkdError(
        'name_taken',
        `snapshot "${top}" already exists: use --tag NEW, or --force to replace it`,
        { tag: top },
      );
    }
  }

  /**
   * `f`'s failure as `disk_full` when it ran out of space on the filesystem holding
   * FORKD_HOME (a push compresses each layer there first, a pull downloads and stages there),
   * told after `f` removed its work and staging dirs.
   */
  private async spaceChecked<T>(what: string, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (e) {
      throw await asDiskFull(e, this.paths.home, what);
    }
  }

  private installContext() {
    return {
      paths: this.paths,
      registry: this.opts.snapshots.registry,
      remove: (tag: string) => this.opts.snapshots.remove(tag, {}),
    };
  }

  private client(registry: string, signal?: AbortSignal): RegistryClient {
    return new RegistryClient(registry, { credentials: credentialsFor(this.paths), signal });
  }

  /** A staging dir among the snapshots' (swept with theirs if the daemon dies). */
  private async staging(): Promise<string> {
    const dir = join(
      this.paths.snapshots,
      `.staging-pack-${process.pid}-${randomBytes(4).toString('hex')}`,
    );
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return dir;
  }

  private workDir(): Promise<string> {
    return makeWork(this.paths);
  }
}

/** A blob named twice (a chunk two files share) is one layer of the manifest. */
function uniqueLayers(layers: Layer[]): Layer[] {
  const seen = new Set<string>();
  return layers.filter((l) => !seen.has(l.digest) && seen.add(l.digest));
}

function count(out: PushResultT, how: 'exists' | 'mounted' | 'uploaded'): void {
  if (how === 'uploaded') out.uploaded += 1;
  else if (how === 'mounted') out.mounted += 1;
  else out.skipped += 1;
}

function summary(pack: PackManifest) {
  return {
    chain: pack.chain,
    image: pack.image?.name ?? null,
    files: pack.files.length,
    logical_bytes: pack.files.reduce((a, f) => a + f.size, 0),
  };
}

const now = () => new Date().toISOString();
