/**
 * Portable snapshots (`forkd.packs`): pack a snapshot with its chain and image into a file
 * on the daemon host, unpack one, push a snapshot to an OCI registry and pull it (or an
 * https:// pack file) back. Each call takes `onProgress` for the daemon's progress lines.
 */
import type { CallOptions } from './client.js';
import { errorFromResponse, InternalError } from './errors.js';
import type { Transport } from './http.js';
import { ndjson } from './ndjson.js';

/** Options of every pack call. */
export interface PackCallOptions extends CallOptions {
  /** Progress lines as the daemon reports them (the request then streams). */
  onProgress?(message: string): void;
}

/** Where an unpack or pull lands. */
export interface InstallOptions extends PackCallOptions {
  /** Install the top snapshot under this tag (its parents keep theirs). */
  tag?: string;
  /** Replace a snapshot of that tag. */
  force?: boolean;
  /**
   * Pull: have the reference ready for forks by reference (into the node cache, as the
   * first fork would), asking the registry where its tag points now. No `tag`/`force` then.
   */
  prefetch?: boolean;
}

/** One entry of the node cache: a chunk, or a snapshot pulled by reference. */
export interface CacheEntry {
  kind: 'chunk' | 'snapshot';
  /** The chunk's digest, or the snapshot's manifest digest. */
  digest: string;
  bytes: number;
  /** Last use (ISO 8601): eviction goes oldest first. */
  usedAt: string;
  tag?: string;
  reference?: string;
}

/** The node cache: its entries (least recently used first), size, limit and counters. */
export interface CacheInfo {
  entries: CacheEntry[];
  bytes: number;
  /** null: no limit. */
  limitBytes: number | null;
  hits: number;
  misses: number;
  bytesFetched: number;
}

/** How `push` stores the files. */
export interface PushOptions extends PackCallOptions {
  /**
   * `chunks` (default): content-addressed chunks, so a node fetches only chunks it lacks;
   * `files`: one blob per file, for forkd versions from before chunks.
   */
  format?: 'chunks' | 'files';
}

/** What `pack` wrote. */
export interface PackInfo {
  tag: string;
  file: string;
  bytes: number;
  /** Snapshots in the pack, root first. */
  chain: string[];
  image: string | null;
  files: number;
  logicalBytes: number;
}

/** What `unpack` or `pull` installed. */
export interface InstallInfo {
  tag: string;
  /** Snapshots written, root first. */
  installed: string[];
  /** Snapshots of the chain this host already had. */
  reused: string[];
  image: string | null;
  bytesDownloaded: number;
  /** Bytes an interrupted pull had fetched already (resumed, not fetched again). */
  bytesResumed: number;
}

/** What `push` sent. */
export interface PushInfo {
  /** `REGISTRY/REPO:TAG@DIGEST`. */
  reference: string;
  digest: string;
  blobs: number;
  uploaded: number;
  /** Blobs the repository had already. */
  skipped: number;
  /** Blobs cross-mounted from another repository of the registry. */
  mounted: number;
  bytesUploaded: number;
}

type Wire = Record<string, unknown>;
const camel = (k: string) => k.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
function fromWire<T>(wire: unknown): T {
  return Object.fromEntries(Object.entries(wire as Wire).map(([k, v]) => [camel(k), v])) as T;
}

type PackEvent =
  | { type: 'progress'; message: string }
  | { type: 'done'; result: Wire }
  | { type: 'error'; error: { code: string; message: string; details?: unknown } };

/**
 * The daemon's snapshot packs.
 *
 * @example
 * await forkd.packs.pack('py', '/srv/py.forkd.tar.zst');
 * await forkd.packs.push('py', '127.0.0.1:5000/team/py:1');
 * await forkd.packs.pull('127.0.0.1:5000/team/py:1', { tag: 'py-copy' });
 */
export class Packs {
  constructor(private readonly transport: Transport) {}

  /**
   * Pack TAG, its chain of parents and its image into `file` (an absolute path on the daemon host).
   *
   * @example
   * const { bytes } = await forkd.packs.pack('py', '/tmp/py.forkd.tar.zst');
   */
  async pack(tag: string, file: string, opts: PackCallOptions = {}): Promise<PackInfo> {
    const path = `/v1/snapshots/${encodeURIComponent(tag)}/pack`;
    return fromWire(await this.call(path, { file }, opts));
  }

  /**
   * Verify a pack file on the daemon host in full, then install it.
   *
   * @example
   * await forkd.packs.unpack('/tmp/py.forkd.tar.zst', { tag: 'py2' });
   */
  async unpack(file: string, opts: InstallOptions = {}): Promise<InstallInfo> {
    const body = { file, ...installBody(opts) };
    return fromWire(await this.call('/v1/snapshots/unpack', body, opts));
  }

  /**
   * Push TAG and its chain to a registry as an OCI artifact; blobs the registry has are skipped.
   *
   * @example
   * const { uploaded, skipped } = await forkd.packs.push('step-2', '127.0.0.1:5000/team/py:step-2');
   */
  async push(tag: string, reference: string, opts: PushOptions = {}): Promise<PushInfo> {
    const path = `/v1/snapshots/${encodeURIComponent(tag)}/push`;
    const body: Wire = { reference };
    if (opts.format !== undefined) body.format = opts.format;
    return fromWire(await this.call(path, body, opts));
  }

  /**
   * Pull a pushed snapshot (`REGISTRY/REPO:TAG`, or an https:// URL of a pack file) with its chain.
   *
   * @example
   * await forkd.packs.pull('127.0.0.1:5000/team/py:step-2');
   */
  async pull(reference: string, opts: InstallOptions = {}): Promise<InstallInfo> {
    const body = { reference, ...installBody(opts) };
    return fromWire(await this.call('/v1/snapshots/pull', body, opts));
  }

  /**
   * The node cache: chunks and snapshots pulled by reference, with hits, misses and bytes fetched.
   *
   * @example
   * const { bytes, limitBytes, entries } = await forkd.packs.cache();
   */
  async cache(opts: CallOptions = {}): Promise<CacheInfo> {
    const wire = await this.transport.json<Wire>({
      method: 'GET',
      path: '/v1/cache',
      signal: opts.signal,
    });
    const info = fromWire<CacheInfo>(wire);
    return { ...info, entries: (wire.entries as Wire[]).map((e) => fromWire<CacheEntry>(e)) };
  }

  /**
   * Evict the node cache down to its limit, or (`all`) everything no sandbox or snapshot needs.
   *
   * @example
   * const { removed } = await forkd.packs.pruneCache({ all: true });
   */
  async pruneCache(
    opts: CallOptions & { all?: boolean } = {},
  ): Promise<{ removed: CacheEntry[]; bytes: number }> {
    const wire = await this.transport.json<Wire>({
      method: 'POST',
      path: '/v1/cache/prune',
      json: opts.all === undefined ? {} : { all: opts.all },
      signal: opts.signal,
    });
    return {
      bytes: wire.bytes as number,
      removed: (wire.removed as Wire[]).map((e) => fromWire<CacheEntry>(e)),
    };
  }

  private async call(path: string, body: Wire, opts: PackCallOptions): Promise<Wire> {
    if (!opts.onProgress) {
      return this.transport.json({ method: 'POST', path, json: body, signal: opts.signal });
    }
    const res = await this.transport.send({
      method: 'POST',
      path,
      json: { ...body, stream: true },
      signal: opts.signal,
    });
    for await (const ev of ndjson<PackEvent>(this.transport.body(res, opts.signal))) {
      if (ev.type === 'progress') opts.onProgress(ev.message);
      else if (ev.type === 'done') return ev.result;
      else if (ev.type === 'error') throw errorFromResponse(500, { error: ev.error });
    }
    throw new InternalError(
      `the ${path} request ended without its outcome; see \`forkd snapshots\``,
    );
  }
}

function installBody(opts: InstallOptions): Wire {
  const body: Wire = {};
  if (opts.tag !== undefined) body.tag = opts.tag;
  if (opts.force !== undefined) body.force = opts.force;
  if (opts.prefetch !== undefined) body.prefetch = opts.prefetch;
  return body;
}
