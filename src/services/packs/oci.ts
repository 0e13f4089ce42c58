/**
 * A snapshot as an OCI artifact: an image manifest with forkd's artifact type, the pack
 * manifest as its config blob and one layer per file of the pack (a one-member sparse
 * zstd tar, named by its `org.opencontainers.image.title`). The same file always gives the
 * same blob, so a branch pushed after its parent uploads only its own files: the parent's
 * are already in the repository (skipped) or in another of the registry (cross-mounted).
 * A local index remembers which file became which blob and which repositories hold it.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { pidAlive } from '../../util/pid.js';
import { sha256File } from '../snapshots/files.js';
import { writeArchive } from './archive.js';
import { PACK_MEDIA, type PackFile, type PackManifest } from './manifest.js';

export const TITLE = 'org.opencontainers.image.title';

export interface Layer {
  mediaType: string;
  digest: string;
  size: number;
  annotations: Record<string, string>;
}

/** forkd's record of blobs it made and where it pushed or pulled them. */
export interface BlobIndex {
  /** sha256 of a pack file → the blob it was tarred into. */
  files: Record<string, { digest: string; size: number }>;
  /** `sha256/chunk size` of a pack file → its chunk index blob and chunk blobs (chunked.ts). */
  chunked: Record<
    string,
    { index: { digest: string; size: number }; chunks: { digest: string; size: number }[] }
  >;
  /** blob digest → `registry/repository`s known to hold it. */
  repos: Record<string, string[]>;
}

export const packCache = (p: Paths) => join(p.home, 'cache', 'packs');
const indexFile = (p: Paths) => join(packCache(p), 'index.json');

export async function readIndex(p: Paths): Promise<BlobIndex> {
  const text = await readFile(indexFile(p), 'utf8').catch(() => '');
  const parsed = (text ? JSON.parse(text) : {}) as Partial<BlobIndex>;
  return { files: parsed.files ?? {}, chunked: parsed.chunked ?? {}, repos: parsed.repos ?? {} };
}

export async function writeIndex(p: Paths, index: BlobIndex): Promise<void> {
  await mkdir(packCache(p), { recursive: true });
  const tmp = `${indexFile(p)}.${process.pid}-${randomBytes(4).toString('hex')}`;
  await writeFile(tmp, JSON.stringify(index));
  await rename(tmp, indexFile(p));
}

/** Note that `repo` (`registry/repository`) holds `digest`. */
export function remember(index: BlobIndex, digest: string, repo: string): void {
  const list = (index.repos[digest] ??= []);
  if (!list.includes(repo)) list.push(repo);
}

/** Other repositories of `registry` that hold `digest`, for a cross-mount. */
export function mountSources(index: BlobIndex, digest: string, registry: string): string[] {
  return (index.repos[digest] ?? [])
    .filter((r) => r.startsWith(`${registry}/`))
    .map((r) => r.slice(registry.length + 1));
}

/**
 * The layer blob of one pack file: made in `work` unless the index knows it and `known`
 * says the registry has it (then no bytes are tarred at all).
 */
export async function layerFor(
  p: Paths,
  index: BlobIndex,
  f: PackFile,
  work: string,
  known: (digest: string) => Promise<boolean>,
): Promise<{ layer: Layer; file?: string }> {
  const annotations = { [TITLE]: f.path, 'dev.forkd.pack.file.sha256': f.sha256 };
  const cached = index.files[f.sha256];
  if (cached && (await known(cached.digest))) {
    return { layer: { mediaType: PACK_MEDIA.file, ...cached, annotations } };
  }
  const out = join(work, `${f.sha256}.tar.zst`);
  await writeArchive([{ dir: p.home, members: [f.path] }], out);
  const digest = `sha256:${await sha256File(out)}`;
  const size = (await stat(out)).size;
  index.files[f.sha256] = { digest, size };
  return { layer: { mediaType: PACK_MEDIA.file, digest, size, annotations }, file: out };
}

/** The artifact manifest over a config blob and the file layers. */
export function artifactManifest(
  config: { digest: string; size: number },
  layers: Layer[],
  created: string,
) {
  return Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      artifactType: PACK_MEDIA.artifact,
      config: { mediaType: PACK_MEDIA.config, ...config },
      layers,
      annotations: { 'org.opencontainers.image.created': created },
    }),
  );
}

export interface ParsedArtifact {
  config: { digest: string; size: number };
  layers: Layer[];
}

/** A fetched manifest as a forkd snapshot artifact, or null when it is something else. */
export function parseArtifact(bytes: Buffer): ParsedArtifact | null {
  const m = JSON.parse(bytes.toString('utf8')) as {
    artifactType?: string;
    config?: { mediaType?: string; digest: string; size: number };
    layers?: Layer[];
  };
  if (m.config?.mediaType !== PACK_MEDIA.config || !Array.isArray(m.layers)) return null;
  return { config: m.config, layers: m.layers };
}

/** Layers by the pack path they hold. */
export function layersByPath(a: ParsedArtifact): Map<string, Layer> {
  return new Map(a.layers.map((l) => [l.annotations?.[TITLE] ?? '', l]));
}

/** A pack's or push's scratch dir in the pack cache, named by its process (see sweepDeadWork). */
export async function makeWork(p: Paths): Promise<string> {
  const dir = join(packCache(p), `work-${process.pid}-${randomBytes(4).toString('hex')}`);
  await mkdir(dir, { recursive: true });
  return dir;
}

export async function cleanWork(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
}

/** The writer's pid in a work dir's (`work-PID-…`) or an index temp file's name (`index.json.PID-…`). */
function writerOf(name: string): number | undefined {
  const m = /^(?:work-|index\.json\.)(\d+)-/.exec(name);
  return m ? Number(m[1]) : undefined;
}

/**
 * Remove the work dirs (a push's compressed layers, as far as they got) and index temp
 * files of processes that are gone: a daemon killed mid-push (the daemon's start). A partial
 * download is kept: the next pull resumes from it. Answers the names removed.
 */
export async function sweepDeadWork(p: Paths): Promise<string[]> {
  const dir = packCache(p);
  const names = await readdir(dir).catch(() => [] as string[]);
  const dead = names.filter((n) => {
    const pid = writerOf(n);
    return pid !== undefined && !pidAlive(pid);
  });
  for (const n of dead) await rm(join(dir, n), { recursive: true, force: true });
  return dead;
}

export type { PackManifest };
