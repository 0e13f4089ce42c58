/**
 * Push and pull of one pack file as chunks (chunks.ts; pack format 2 in a registry). A
 * push sends a chunk only when the repository lacks it (HEAD), else cross-mounts it from
 * another repository of the registry known to hold it, else uploads it; then the file's
 * index blob. A pull reads the index, takes each chunk from the node cache or fetches it
 * into the cache (verified by digest before a byte is used), and writes the file in the
 * staging dir with its holes; the caller hashes the whole file against the pack manifest.
 */
import { mkdir, open } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { PushResultT } from '../../contract/schemas.js';
import type { RegistryClient } from '../../drivers/registry/index.js';
import { sha256 } from '../../drivers/registry/index.js';
import type { NodeCache } from './cache.js';
import {
  checkIndex,
  chunkBlob,
  dataChunks,
  extentsOf,
  unpackChunk,
  writeChunk,
  type ChunkRef,
  type FileIndex,
} from './chunks.js';
import { PACK_MEDIA, type PackFile } from './manifest.js';
import { mountSources, remember, TITLE, type BlobIndex, type Layer } from './oci.js';

/** Chunks fetched or pushed at once for one file. */
const PARALLEL = 4;

export interface ChunkPush {
  client: RegistryClient;
  repo: string;
  registry: string;
  index: BlobIndex;
  chunkSize: number;
  out: PushResultT;
}

/** Run `f` over `items`, at most `n` at a time, in order of start. */
async function each<T>(items: T[], n: number, f: (x: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await f(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
}

function count(out: PushResultT, how: 'exists' | 'mounted' | 'uploaded'): void {
  if (how === 'uploaded') out.uploaded += 1;
  else if (how === 'mounted') out.mounted += 1;
  else out.skipped += 1;
}

const here = (ctx: ChunkPush) => `${ctx.registry}/${ctx.repo}`;

/** Push one blob (exists → mounted → uploaded), counted and remembered. */
async function pushOne(ctx: ChunkPush, digest: string, bytes: Buffer): Promise<void> {
  const how = await ctx.client.pushBlob(ctx.repo, digest, bytes, bytes.length, {
    mountFrom: mountSources(ctx.index, digest, ctx.registry),
    onBytes: (n) => (ctx.out.bytes_uploaded += n),
  });
  count(ctx.out, how);
  remember(ctx.index, digest, here(ctx));
}

/** The layers of one file pushed as chunks: its index first, then its chunks. */
export async function pushChunkedFile(ctx: ChunkPush, home: string, f: PackFile): Promise<Layer[]> {
  const key = `${f.sha256}/${ctx.chunkSize}`;
  const known = ctx.index.chunked[key];
  // The index blob goes up after its chunks: a repository that has it has them all.
  if (known && (await ctx.client.hasBlob(ctx.repo, known.index.digest))) {
    ctx.out.skipped += 1 + known.chunks.length;
    return layersOf(f, known.index, known.chunks);
  }
  const path = join(home, f.path);
  const { size, extents } = await extentsOf(path);
  const chunks: ChunkRef[] = [];
  const fh = await open(path, 'r');
  try {
    await each(dataChunks(size, extents, ctx.chunkSize), PARALLEL, async (r) => {
      const blob = await chunkBlob(fh, r.offset, r.length);
      await pushOne(ctx, blob.digest, blob.bytes);
      chunks.push({ ...r, digest: blob.digest, size: blob.bytes.length });
    });
  } finally {
    await fh.close();
  }
  chunks.sort((a, b) => a.offset - b.offset);
  const body: FileIndex = {
    format: 'forkd-chunks',
    version: 1,
    path: f.path,
    size: f.size,
    sha256: f.sha256,
    chunk_size: ctx.chunkSize,
    extents,
    chunks,
  };
  const bytes = Buffer.from(JSON.stringify(body));
  const index = { digest: sha256(bytes), size: bytes.length };
  await pushOne(ctx, index.digest, bytes);
  const blobs = chunks.map((c) => ({ digest: c.digest, size: c.size }));
  ctx.index.chunked[key] = { index, chunks: blobs };
  return layersOf(f, index, blobs);
}

function layersOf(
  f: PackFile,
  index: { digest: string; size: number },
  chunks: { digest: string; size: number }[],
): Layer[] {
  const annotations = { [TITLE]: f.path, 'dev.forkd.pack.file.sha256': f.sha256 };
  return [
    { mediaType: PACK_MEDIA.index, ...index, annotations },
    ...chunks.map((c) => ({ mediaType: PACK_MEDIA.chunk, ...c, annotations: {} })),
  ];
}

export interface ChunkPull {
  client: RegistryClient;
  repo: string;
  cache: NodeCache;
  staging: string;
  /** Bytes fetched from the registry (not the cache). */
  onBytes: (n: number) => void;
}

/** Fetch (or take from the cache) every chunk of `f` and write it, with its holes, in staging. */
export async function pullChunkedFile(
  ctx: ChunkPull,
  layer: { digest: string; size: number },
  f: PackFile,
): Promise<void> {
  const index = checkIndex(
    JSON.parse((await ctx.client.getBlobBytes(ctx.repo, layer.digest, layer.size)).toString()),
    f,
  );
  const path = join(ctx.staging, f.path);
  await mkdir(dirname(path), { recursive: true });
  const fh = await open(path, 'wx');
  try {
    await fh.truncate(f.size);
    await each(index.chunks, PARALLEL, async (c) => {
      const blob = await ctx.cache.chunk(ctx.client, ctx.repo, c, f.path, ctx.onBytes);
      await writeChunk(fh, c, unpackChunk(blob, c, f.path), index.extents);
    });
  } finally {
    await fh.close();
  }
}
