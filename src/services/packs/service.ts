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
  PackResultT,
  PullSnapshotT,
  PushResultT,
  UnpackResultT,
} from '../../contract/schemas.js';
import { detectAccel } from '../../drivers/qemu/accel.js';
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
import { installPack, reusable, stagedManifests, type Origin } from './install.js';
import {
  checkPackManifest,
  hostProblem,
  PACK_MANIFEST,
  PACK_MEDIA,
  snapshotPath,
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

export interface PackServiceOptions {
  paths: Paths;
  snapshots: SnapshotManager;
  qemuVersion: () => Promise<string>;
}

type Progress = (message: string) => void;
const quiet: Progress = () => undefined;

export class PackManager implements PackService {
  constructor(private readonly opts: PackServiceOptions) {}

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
  ): Promise<PushResultT> {
    return this.spaceChecked(`pack push of ${tag}`, () =>
      this.pushing(tag, reference, onProgress, signal),
    );
  }

  private async pushing(
    tag: string,
    reference: string,
    onProgress: Progress,
    signal?: AbortSignal,
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
    try {
      const layers: Layer[] = [];
      for (const f of pack.files) {
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
      const config = Buffer.from(JSON.stringify(pack));
      const configFile = join(work, 'config.json');
      await writeFile(configFile, config);
      const configDigest = sha256(config);
      count(out, await client.pushBlob(repo, configDigest, configFile, config.length));
      crashPoint('pack:blobs-pushed');
      const manifest = artifactManifest(
        { digest: configDigest, size: config.length },
        layers,
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
  ): Promise<UnpackResultT> {
    return this.spaceChecked(`pull of ${req.reference}`, () =>
      this.pulling(req, onProgress, signal),
    );
  }

  private async pulling(
    req: PullSnapshotT,
    onProgress: Progress,
    signal?: AbortSignal,
  ): Promise<UnpackResultT> {
    const opts = { tag: req.tag, force: req.force };
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
    );
    await this.checkHost(pack, opts);
    const byPath = layersByPath(artifact);
    const staging = await this.staging();
    const blobs = join(packCache(this.paths), 'blobs');
    await mkdir(blobs, { recursive: true });
    const stats = { bytes_downloaded: 0, bytes_resumed: 0 };
    const fetch = async (path: string) => {
      const layer = byPath.get(path);
      if (!layer)
        throw new ForkdError(
          'pack_invalid',
          `${req.reference} lacks a layer for ${path} (a parent layer is missing): push it again`,
          { file: path },
        );
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
      const reuse = await reusable(this.paths, this.opts.snapshots.registry, pack, staged);
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
  private async checkHost(pack: PackManifest, opts: { tag?: string; force?: boolean }) {
    const here = { qemu: await this.opts.qemuVersion(), accel: (await detectAccel()).accel };
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
    if (!opts.force && this.opts.snapshots.registry.isPublished(top)) {
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
