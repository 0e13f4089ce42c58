/**
 * A pack file as content-addressed chunks (docs/packs.md "Chunks"): the file is cut at
 * fixed offsets into chunks of `chunk_size` bytes; a chunk is sent only when its range
 * holds data (SEEK_DATA), as its bytes (a hole inside it reads as zeros) compressed with
 * gzip, and named by the digest of that blob, so the same bytes at the same offset are the
 * same blob in every snapshot, branch and repository. An index per file records the
 * chunks and the file's data extents: installing writes a chunk's bytes only inside those
 * extents, so holes come back as holes and a page written with zeros stays written (a
 * memory diff depends on that).
 */
import { createHash } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import { gunzipSync, gzipSync } from 'node:zlib';
import { packInvalid } from './manifest.js';
import { vmm } from '../vmm.js';

/**
 * Bytes per chunk. 2 MiB: measured against 1 and 4 MiB on a warm snapshot and a branch
 * writing 10 MiB (docs/packs.md "Chunk size"): a branch's scattered pages cost less with
 * smaller chunks, while a full memory needs fewer requests with larger ones.
 */
export const DEFAULT_CHUNK_BYTES = 2 * 1048576;

/** FORKD_CHUNK_MIB (1–64) or the default. */
export function chunkBytes(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.FORKD_CHUNK_MIB);
  return Number.isInteger(n) && n >= 1 && n <= 64 ? n * 1048576 : DEFAULT_CHUNK_BYTES;
}

/** One chunk of a file: where it is, and the blob that holds its bytes. */
export interface ChunkRef {
  offset: number;
  length: number;
  /** Digest of the gzip blob; the cache and the registry know it by this. */
  digest: string;
  /** Bytes of the blob. */
  size: number;
}

/** The index blob of one pack file (`application/vnd.forkd.pack.index.v1+json`). */
export interface FileIndex {
  format: 'forkd-chunks';
  version: 1;
  path: string;
  size: number;
  sha256: string;
  chunk_size: number;
  /** Data extents, `[offset, length]`: everything else is a hole. */
  extents: [number, number][];
  chunks: ChunkRef[];
}

/** A blob of a chunk: its bytes compressed, with its digest. */
export interface ChunkBlob {
  digest: string;
  bytes: Buffer;
}

/** The chunk ranges of a file that hold data, in order. */
export function dataChunks(
  size: number,
  extents: [number, number][],
  chunk: number,
): { offset: number; length: number }[] {
  const out: { offset: number; length: number }[] = [];
  for (const [off, len] of extents) {
    for (let k = Math.floor(off / chunk) * chunk; k < off + len; k += chunk) {
      if (out.at(-1)?.offset === k) continue;
      out.push({ offset: k, length: Math.min(chunk, size - k) });
    }
  }
  return out;
}

/** A file's extents (sorted, within its size). */
export async function extentsOf(
  file: string,
): Promise<{ size: number; extents: [number, number][] }> {
  const got = await vmm().memory.fileExtents(file);
  // The last extent can reach past EOF on some filesystems' rounding: clip it.
  const extents = got.extents
    .map(([o, l]): [number, number] => [o, Math.min(l, got.size - o)])
    .filter(([, l]) => l > 0);
  return { size: got.size, extents };
}

/** Read one chunk's bytes (holes as zeros) and make its blob. */
export async function chunkBlob(
  fh: FileHandle,
  offset: number,
  length: number,
): Promise<ChunkBlob> {
  const raw = Buffer.alloc(length);
  await fh.read(raw, 0, length, offset);
  // gzip is deterministic for a given zlib: the same bytes give the same blob (and digest).
  const bytes = gzipSync(raw, { level: 1 });
  return { digest: `sha256:${createHash('sha256').update(bytes).digest('hex')}`, bytes };
}

/**
 * A verified blob's bytes, checked to be `length` long: a blob whose digest matched but
 * which does not decompress to its chunk is refused as well.
 */
export function unpackChunk(blob: Buffer, c: ChunkRef, path: string): Buffer {
  let raw: Buffer;
  try {
    raw = gunzipSync(blob, { maxOutputLength: c.length + 1 });
  } catch {
    throw packInvalid(`chunk ${c.digest} of ${path} does not decompress`, { digest: c.digest });
  }
  if (raw.length !== c.length) {
    throw packInvalid(`chunk ${c.digest} of ${path} holds ${raw.length} bytes, not ${c.length}`, {
      digest: c.digest,
    });
  }
  return raw;
}

/** Write a chunk's bytes into the file, only inside its data extents (holes stay holes). */
export async function writeChunk(
  fh: FileHandle,
  c: ChunkRef,
  raw: Buffer,
  extents: [number, number][],
): Promise<void> {
  const end = c.offset + c.length;
  for (const [off, len] of extents) {
    const from = Math.max(off, c.offset);
    const to = Math.min(off + len, end);
    if (from < to) await fh.write(raw, from - c.offset, to - from, from);
  }
}

/** Check an index blob's shape against the pack file it claims to be. */
export function checkIndex(
  value: unknown,
  file: { path: string; size: number; sha256: string },
): FileIndex {
  const x = value as Partial<FileIndex>;
  const ok =
    x?.format === 'forkd-chunks' &&
    x.version === 1 &&
    x.path === file.path &&
    x.size === file.size &&
    x.sha256 === file.sha256 &&
    Array.isArray(x.extents) &&
    Array.isArray(x.chunks) &&
    x.chunks.every(
      (c) =>
        typeof c.offset === 'number' &&
        c.offset >= 0 &&
        c.length > 0 &&
        c.offset + c.length <= file.size &&
        /^sha256:[a-f0-9]{64}$/.test(c.digest),
    );
  if (!ok) throw packInvalid(`the chunk index of ${file.path} does not match the pack manifest`);
  return x as FileIndex;
}
