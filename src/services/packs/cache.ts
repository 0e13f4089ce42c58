/**
 * The node cache (docs/packs.md "Node cache"): chunk blobs by digest
 * (`cache/chunks/HEX`), fetched once whichever snapshot, tag or reference asked for them,
 * verified before they are kept (a blob lands under its name only once its digest
 * matched), and the snapshots a fork by reference installed (`cache/refs.json`: manifest
 * digest → local tag), shared by every reference that names the same content. Used
 * least-recently first when over its size limit; a snapshot a sandbox runs from, one
 * another is built on, or one the caller says to keep is never evicted. Counts hits,
 * misses and bytes fetched for /metrics.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import type { RegistryClient } from '../../drivers/registry/index.js';
import { ForkdError, isForkdError } from '../../errors.js';

/** A snapshot installed by a fork by reference (or a prefetch). */
export interface CachedRef {
  tag: string;
  reference: string;
  digest: string;
  pulled_at: string;
  used_at: string;
}

export interface CacheEntry {
  kind: 'chunk' | 'snapshot';
  /** The chunk's digest, or the snapshot's manifest digest. */
  digest: string;
  bytes: number;
  used_at: string;
  tag?: string;
  reference?: string;
}

export interface CacheStats {
  hits: number;
  misses: number;
  bytes_fetched: number;
}

/** FORKD_CACHE_MIB (0: no limit) or 20 GiB, in bytes. */
export function cacheLimit(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.FORKD_CACHE_MIB ?? 20480);
  if (n === 0) return Infinity;
  return (Number.isFinite(n) && n > 0 ? n : 20480) * 1048576;
}

const HEX = /^[a-f0-9]{64}$/;

/** A chunk to fetch: from which registry and repository, its digest and size, for what. */
type ChunkFetch = [
  client: RegistryClient,
  repo: string,
  c: { digest: string; size: number },
  what: string,
  onFetched?: (n: number) => void,
];
export class NodeCache {
  readonly stats: CacheStats = { hits: 0, misses: 0, bytes_fetched: 0 };

  constructor(private readonly paths: Paths) {}

  get dir(): string {
    return join(this.paths.home, 'cache', 'chunks');
  }

  private get refsFile(): string {
    return join(this.paths.home, 'cache', 'refs.json');
  }

  chunkPath(digest: string): string {
    return join(this.dir, digest.slice('sha256:'.length));
  }

  /**
   * The chunk blob `digest` in the cache, fetched from `repo` unless it is there. A blob
   * that fails its digest is fetched once more, then the pull fails naming it; a download
   * cut off leaves `HEX.partial`, which the next fetch resumes.
   */
  async chunk(...args: ChunkFetch): Promise<Buffer> {
    // One fetch per digest at a time: two files (or two pulls) needing the same chunk
    // share it rather than write one `.partial` twice.
    const { digest } = args[2];
    const running = this.fetching.get(digest);
    if (running) return running;
    const p = this.fetchChunk(...args).finally(() => this.fetching.delete(digest));
    this.fetching.set(digest, p);
    return p;
  }

  private readonly fetching = new Map<string, Promise<Buffer>>();

  private async fetchChunk(...[client, repo, c, what, onFetched]: ChunkFetch): Promise<Buffer> {
    const file = this.chunkPath(c.digest);
    const have = await readFile(file).catch(() => undefined);
    if (have) {
      this.stats.hits += 1;
      const t = new Date();
      await utimes(file, t, t).catch(() => undefined);
      return have;
    }
    this.stats.misses += 1;
    await mkdir(this.dir, { recursive: true });
    const onBytes = (n: number) => {
      this.stats.bytes_fetched += n;
      onFetched?.(n);
    };
    for (let attempt = 1; ; attempt++) {
      try {
        await client.getBlobResumable(repo, c.digest, file, { size: c.size, onBytes });
        return await readFile(file);
      } catch (e) {
        const corrupt = isForkdError(e) && /does not match its digest/.test(e.message);
        if (!corrupt) throw e;
        if (attempt >= 2) {
          throw new ForkdError(
            'blob_invalid',
            `chunk ${c.digest} of ${what} failed its digest twice: the registry holds a corrupt blob; push the snapshot again. Nothing was installed`,
            { digest: c.digest, file: what },
          );
        }
      }
    }
  }

  async refs(): Promise<Record<string, CachedRef>> {
    const text = await readFile(this.refsFile, 'utf8').catch(() => '');
    return text ? (JSON.parse(text) as Record<string, CachedRef>) : {};
  }

  async saveRefs(refs: Record<string, CachedRef>): Promise<void> {
    await mkdir(join(this.paths.home, 'cache'), { recursive: true });
    const tmp = `${this.refsFile}.${process.pid}-${randomBytes(4).toString('hex')}`;
    await writeFile(tmp, JSON.stringify(refs, null, 1));
    await rename(tmp, this.refsFile);
  }

  /** Every chunk and cached snapshot, least recently used first. */
  async list(snapshotBytes: (tag: string) => Promise<number>): Promise<CacheEntry[]> {
    const out: CacheEntry[] = [];
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (!HEX.test(name)) continue;
      const s = await stat(join(this.dir, name)).catch(() => undefined);
      if (!s) continue;
      const used_at = s.mtime.toISOString();
      out.push({ kind: 'chunk', digest: `sha256:${name}`, bytes: s.size, used_at });
    }
    for (const r of Object.values(await this.refs())) {
      const bytes = await snapshotBytes(r.tag).catch(() => 0);
      out.push({
        kind: 'snapshot',
        digest: r.digest,
        bytes,
        used_at: r.used_at,
        tag: r.tag,
        reference: r.reference,
      });
    }
    return out.sort((a, b) => a.used_at.localeCompare(b.used_at));
  }

  async removeChunk(digest: string): Promise<void> {
    await rm(this.chunkPath(digest), { force: true });
  }

  /** Drop what a pull cut off left half-fetched (`HEX.partial`): `prune --all`. */
  async removePartials(): Promise<number> {
    let n = 0;
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (!name.endsWith('.partial')) continue;
      await rm(join(this.dir, name), { force: true });
      n += 1;
    }
    return n;
  }
}
