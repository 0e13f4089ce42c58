/**
 * A snapshot's memory, stored in proportion to change (docs/snapshots.md "How a branch's
 * memory is stored"). A branch's memory is a **diff** (`memory.diff`): a sparse file of the
 * guest's RAM size holding only the pages that differ from its parent snapshot's memory,
 * a hole meaning "as in the parent"; a full memory (`memory`) holds every page, a hole
 * meaning zero. QEMU maps one file, so a fork of a diff snapshot maps its **materialized**
 * memory: the full file built once from the chain (under a temp name, then renamed to
 * `memory`: never half-visible), cached and evictable while nothing maps it.
 *
 * A diff names the memory it is over by the parent's tag and memory id (which survives
 * the parent's own compaction); chains deeper than a bound are compacted in the
 * background: the deep snapshot's memory becomes full, its content unchanged.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { crashPoint } from '../../util/crash.js';
import {
  describeFile,
  formatOf,
  listTags,
  readManifest,
  snapshotDir,
  SNAPSHOT_FILES,
  type SnapshotManifest,
} from './files.js';
import { vmm } from '../vmm.js';

/** The file of a diff memory; its materialized cache is the full name, `memory`. */
export const MEMORY_DIFF_FILE = 'memory.diff';
const TMP_PREFIX = '.memory.tmp-';

/** Past this many diffs over a full memory a new branch is compacted (FORKD_MEMORY_CHAIN_MAX). */
export function memoryChainMax(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.FORKD_MEMORY_CHAIN_MAX ?? 16);
  return Number.isInteger(n) && n >= 1 ? n : 16;
}

/** Materialized memory kept while unused, in bytes on disk (FORKD_MEMORY_CACHE_MIB). */
export function memoryCacheBudget(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.FORKD_MEMORY_CACHE_MIB ?? 4096);
  return (Number.isFinite(n) && n >= 0 ? n : 4096) * 1048576;
}

/** The identity of a snapshot's memory content (a full one written before diffs: its sha256). */
export function memoryId(m: SnapshotManifest): string {
  return m.memory_id ?? m.files.memory.sha256;
}

export const isDiff = (m: SnapshotManifest): boolean => m.memory_diff !== undefined;

/** The full memory file a fork maps: the stored one, or a diff's materialized cache. */
export const fullMemoryPath = (p: Paths, tag: string): string =>
  join(snapshotDir(p, tag), SNAPSHOT_FILES.memory);

const storedMemoryPath = (p: Paths, m: SnapshotManifest): string =>
  join(snapshotDir(p, m.tag), m.files.memory.name);

/** Read manifests once per walk. */
type Manifests = (tag: string) => Promise<SnapshotManifest>;
const fromDisk =
  (p: Paths): Manifests =>
  (tag) =>
    readManifest(p, tag);

/**
 * The files a page of `m`'s memory is read through, topmost first, ending at a full file:
 * its own diff and its parents' down to one that is full or materialized.
 */
export async function memoryLayers(
  p: Paths,
  m: SnapshotManifest,
  read: Manifests = fromDisk(p),
): Promise<string[]> {
  const layers: string[] = [];
  for (let cur = m; ;) {
    const full = fullMemoryPath(p, cur.tag);
    if (!isDiff(cur) || existsSync(full)) return [...layers, full];
    layers.push(storedMemoryPath(p, cur));
    if (layers.length > 1024) throw new ForkdError('internal', `memory chain of "${m.tag}" loops`);
    cur = await read((cur.memory_diff as { parent: string }).parent);
  }
}

/** How many diffs `m`'s memory is read through before a full file (0: full). */
export async function memoryDepth(
  p: Paths,
  m: SnapshotManifest,
  read: Manifests = fromDisk(p),
): Promise<number> {
  let depth = 0;
  for (let cur = m; isDiff(cur); depth++) {
    cur = await read((cur.memory_diff as { parent: string }).parent);
  }
  return depth;
}

/**
 * The first problem of `m`'s memory chain: a parent whose manifest or memory file is gone,
 * or whose memory is not the one the diff was made over. Null when every link holds.
 */
export async function memoryChainProblem(
  p: Paths,
  m: SnapshotManifest,
): Promise<{ file: string; problem: string } | null> {
  for (let cur = m; cur.memory_diff;) {
    const { parent, parent_memory_id } = cur.memory_diff;
    const over = await readManifest(p, parent).catch(() => undefined);
    const where = join(snapshotDir(p, parent), SNAPSHOT_FILES.memory);
    if (!over) {
      const problem = `missing parent memory: snapshot "${parent}", which the memory of "${cur.tag}" is a diff over, has no manifest`;
      return { file: where, problem };
    }
    const file = storedMemoryPath(p, over);
    if (!existsSync(file)) {
      return {
        file,
        problem: `missing parent memory ${file} (snapshot "${parent}", which the memory of "${cur.tag}" is a diff over)`,
      };
    }
    if (memoryId(over) !== parent_memory_id) {
      return {
        file,
        problem: `memory of snapshot "${parent}" is not the one the memory of "${cur.tag}" is a diff over`,
      };
    }
    cur = over;
  }
  return null;
}

/** Materializations in flight, by tag: two forks of one snapshot build it once. */
const building = new Map<string, Promise<string>>();

/**
 * The full memory file of `m`, built from its chain if it is a diff and not cached yet
 * (a sparse copy of the nearest full file, then each diff above it written over, in order).
 */
export function materialize(
  p: Paths,
  m: SnapshotManifest,
): Promise<{ path: string; ms: number; built: boolean }> {
  const path = fullMemoryPath(p, m.tag);
  const t0 = performance.now();
  if (!isDiff(m) || existsSync(path)) {
    if (isDiff(m)) void touch(path);
    return Promise.resolve({ path, ms: 0, built: false });
  }
  let job = building.get(m.tag);
  if (!job) {
    job = build(p, m, path).finally(() => building.delete(m.tag));
    building.set(m.tag, job);
  }
  return job.then(() => ({ path, ms: Math.round(performance.now() - t0), built: true }));
}

async function build(p: Paths, m: SnapshotManifest, path: string): Promise<string> {
  const problem = await memoryChainProblem(p, m);
  if (problem) {
    throw new ForkdError('snapshot_broken', `snapshot "${m.tag}" is broken: ${problem.problem}`, {
      tag: m.tag,
      reason: problem.problem,
      layer: problem.file,
    });
  }
  const layers = await memoryLayers(p, m);
  const tmp = join(
    snapshotDir(p, m.tag),
    `${TMP_PREFIX}${process.pid}-${randomBytes(4).toString('hex')}`,
  );
  try {
    await vmm().memory.sparseCopy(layers.at(-1) as string, tmp, m.memory_mib * 1048576);
    for (const diff of layers.slice(0, -1).reverse()) await vmm().memory.overlayInto(diff, tmp);
    crashPoint('memory:materialized');
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  return path;
}

/** Mark a cache as used now (eviction removes the least recently used first). */
async function touch(path: string): Promise<void> {
  const now = new Date();
  await utimes(path, now, now).catch(() => undefined);
}

/**
 * Make `staging`'s captured pages (written into an empty file) a diff over `parent`:
 * every page equal to the parent's is punched out. The file is renamed `memory.diff`.
 */
export async function diffAgainst(
  p: Paths,
  staging: string,
  parent: SnapshotManifest,
): Promise<{ kept_bytes: number; ms: number }> {
  const pages = join(staging, SNAPSHOT_FILES.memory);
  const got = await vmm().memory.diffOver(pages, await memoryLayers(p, parent));
  await rename(pages, join(staging, MEMORY_DIFF_FILE));
  return { kept_bytes: got.bytes ?? 0, ms: got.ms ?? 0 };
}

/** `m` with a full memory of the same content: no parent memory, the same memory id. */
export function withoutDiff<T extends Pick<SnapshotManifest, 'memory_diff' | 'memory_id'>>(
  m: T & { files: SnapshotManifest['files'] },
): T {
  const out = { ...m, memory_id: memoryId(m as unknown as SnapshotManifest) };
  delete out.memory_diff;
  return out;
}

/** Sizes `snapshot info` shows of a snapshot's memory. */
export interface MemorySizes {
  kind: 'full' | 'diff';
  parent: string | null;
  logical_bytes: number;
  stored_bytes: number;
  materialized_bytes: number;
  depth: number;
}

export async function memorySizes(
  p: Paths,
  m: SnapshotManifest,
  all: Map<string, SnapshotManifest>,
): Promise<MemorySizes> {
  const read: Manifests = async (tag) => all.get(tag) ?? readManifest(p, tag);
  const cache = isDiff(m) ? await stat(fullMemoryPath(p, m.tag)).catch(() => undefined) : undefined;
  return {
    kind: isDiff(m) ? 'diff' : 'full',
    parent: m.memory_diff?.parent ?? null,
    logical_bytes: m.files.memory.size,
    stored_bytes: m.files.memory.allocated,
    materialized_bytes: cache ? cache.blocks * 512 : 0,
    depth: await memoryDepth(p, m, read).catch(() => 0),
  };
}

/**
 * Turn a diff snapshot's memory into a full one, its content (and memory id) unchanged:
 * materialize, rewrite the manifest (temp name + rename), drop the diff. A crash between
 * steps leaves a manifest that matches the files it names; the leftover goes at start.
 */
export async function compactMemory(p: Paths, m: SnapshotManifest): Promise<SnapshotManifest> {
  if (!isDiff(m)) return m;
  await materialize(p, m);
  const dir = snapshotDir(p, m.tag);
  const next: SnapshotManifest = {
    ...withoutDiff(m),
    format_version: formatOf(withoutDiff(m)),
    memory_id: memoryId(m),
    files: { ...m.files, memory: await describeFile(dir, SNAPSHOT_FILES.memory) },
  };
  const tmp = join(dir, `.manifest.tmp-${process.pid}`);
  await writeFile(tmp, JSON.stringify(next, null, 2) + '\n');
  await rename(tmp, join(dir, 'manifest.json'));
  crashPoint('memory:compacted');
  await rm(join(dir, MEMORY_DIFF_FILE), { force: true });
  return next;
}

/**
 * At start: remove half-built caches, and what a crash mid-compaction left (a diff whose
 * manifest already says full).
 */
export async function sweepMemory(p: Paths): Promise<void> {
  for (const tag of await listTags(p)) {
    const dir = snapshotDir(p, tag);
    for (const n of await readdir(dir).catch(() => [] as string[])) {
      if (n.startsWith(TMP_PREFIX) || n.startsWith('.manifest.tmp-'))
        await rm(join(dir, n), { force: true });
    }
    const m = await readManifest(p, tag).catch(() => undefined);
    if (m && !isDiff(m)) await rm(join(dir, MEMORY_DIFF_FILE), { force: true });
  }
}

/**
 * Evict materialized memory no sandbox or pool maps, least recently used first, until
 * what is left fits `budget` bytes. Returns the tags evicted.
 */
export async function evictMaterialized(
  p: Paths,
  manifests: Map<string, SnapshotManifest>,
  inUse: (tag: string) => boolean,
  budget: number,
): Promise<string[]> {
  const caches: { tag: string; path: string; bytes: number; used: number }[] = [];
  for (const m of manifests.values()) {
    if (!isDiff(m)) continue;
    const path = fullMemoryPath(p, m.tag);
    const st = await stat(path).catch(() => undefined);
    if (st) caches.push({ tag: m.tag, path, bytes: st.blocks * 512, used: st.mtimeMs });
  }
  let total = caches.reduce((a, c) => a + c.bytes, 0);
  const evicted: string[] = [];
  for (const c of caches.sort((a, b) => a.used - b.used)) {
    if (total <= budget) break;
    if (inUse(c.tag) || building.has(c.tag)) continue;
    const now = await readManifest(p, c.tag).catch(() => undefined);
    if (!now || !isDiff(now)) continue; // compacted since: `memory` is its stored memory now
    await rm(c.path, { force: true });
    total -= c.bytes;
    evicted.push(c.tag);
  }
  return evicted;
}
