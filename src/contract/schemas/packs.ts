/**
 * The REST contract, packs, push and pull of snapshots, and the node cache (docs/packs.md).
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type, { type Static } from 'typebox';
import { strict } from './build.js';
import { ErrorBody } from './common.js';
import { SnapshotTag } from './snapshots.js';

/** `forkd pack` / `forkd unpack` / `forkd push` / `forkd pull` (docs/packs.md). */
const PackFilePath = Type.String({
  minLength: 1,
  maxLength: 4096,
  description: 'an absolute path on the daemon host',
});
export const PackSnapshot = Type.Object(
  { file: PackFilePath, stream: Type.Optional(Type.Boolean()) },
  strict,
);
export type PackSnapshotT = Static<typeof PackSnapshot>;
export const UnpackSnapshot = Type.Object(
  {
    file: PackFilePath,
    tag: Type.Optional(SnapshotTag),
    force: Type.Optional(Type.Boolean({ description: 'replace a snapshot of that tag' })),
    stream: Type.Optional(Type.Boolean()),
  },
  strict,
);
export type UnpackSnapshotT = Static<typeof UnpackSnapshot>;
export const PushSnapshot = Type.Object(
  {
    reference: Type.String({ minLength: 1, maxLength: 1024, description: 'REGISTRY/REPO[:TAG]' }),
    format: Type.Optional(
      Type.Union([Type.Literal('chunks'), Type.Literal('files')], {
        description:
          'chunks (default): content-addressed chunks, pulled by forkd 0.1 builds with chunk support; files: one blob per file, as older forkd versions read',
      }),
    ),
    stream: Type.Optional(Type.Boolean()),
  },
  strict,
);
export type PushSnapshotT = Static<typeof PushSnapshot>;
export const PullSnapshot = Type.Object(
  {
    reference: Type.String({
      minLength: 1,
      maxLength: 4096,
      description: 'REGISTRY/REPO[:TAG][@DIGEST], or an https:// URL of a pack file',
    }),
    tag: Type.Optional(SnapshotTag),
    force: Type.Optional(Type.Boolean({ description: 'replace a snapshot of that tag' })),
    prefetch: Type.Optional(
      Type.Boolean({
        description:
          'have it ready for forks by reference (as the first fork would pull it, into the node cache; no tag or force then)',
      }),
    ),
    stream: Type.Optional(Type.Boolean()),
  },
  strict,
);
export type PullSnapshotT = Static<typeof PullSnapshot>;
export const PackResult = Type.Object(
  {
    tag: SnapshotTag,
    file: Type.String(),
    bytes: Type.Integer({ description: 'size of the pack file' }),
    chain: Type.Array(Type.String(), { description: 'snapshots in the pack, root first' }),
    image: Type.Union([Type.String(), Type.Null()]),
    files: Type.Integer(),
    logical_bytes: Type.Integer({ description: 'the files packed, holes included' }),
  },
  { $id: 'PackResult' },
);
export type PackResultT = Static<typeof PackResult>;
export const UnpackResult = Type.Object(
  {
    tag: SnapshotTag,
    installed: Type.Array(Type.String(), { description: 'snapshots written, root first' }),
    reused: Type.Array(Type.String(), { description: 'snapshots of the chain already here' }),
    image: Type.Union([Type.String(), Type.Null()]),
    bytes_downloaded: Type.Integer(),
    bytes_resumed: Type.Integer({ description: 'bytes an interrupted pull had already fetched' }),
  },
  { $id: 'UnpackResult' },
);
export type UnpackResultT = Static<typeof UnpackResult>;
export const PushResult = Type.Object(
  {
    reference: Type.String({ description: 'REGISTRY/REPO:TAG@DIGEST' }),
    digest: Type.String(),
    blobs: Type.Integer(),
    uploaded: Type.Integer(),
    skipped: Type.Integer({ description: 'blobs the repository had' }),
    mounted: Type.Integer({ description: 'blobs cross-mounted from another repository' }),
    bytes_uploaded: Type.Integer(),
  },
  { $id: 'PushResult' },
);
export type PushResultT = Static<typeof PushResult>;
/** One line of a streamed pack, unpack, push or pull. */
export const PackEvent = Type.Union(
  [
    Type.Object({ type: Type.Literal('progress'), message: Type.String() }),
    Type.Object({
      type: Type.Literal('done'),
      result: Type.Union([PackResult, UnpackResult, PushResult]),
    }),
    Type.Object({ type: Type.Literal('error'), error: ErrorBody.properties.error }),
  ],
  { $id: 'PackEvent' },
);
/** One entry of the node cache (docs/packs.md "Node cache"). */
export const CacheEntry = Type.Object(
  {
    kind: Type.Union([Type.Literal('chunk'), Type.Literal('snapshot')]),
    digest: Type.String({
      description: "a chunk's digest, or a pulled snapshot's manifest digest",
    }),
    bytes: Type.Integer({ description: 'bytes on disk' }),
    used_at: Type.String({ description: 'last use (ISO 8601): eviction goes oldest first' }),
    tag: Type.Optional(Type.String({ description: 'a snapshot: its local tag' })),
    reference: Type.Optional(
      Type.String({ description: 'a snapshot: the reference it was pulled by' }),
    ),
  },
  { $id: 'CacheEntry' },
);
export type CacheEntryT = Static<typeof CacheEntry>;
export const CacheInfo = Type.Object(
  {
    entries: Type.Array(CacheEntry, { description: 'least recently used first' }),
    bytes: Type.Integer(),
    limit_bytes: Type.Union([Type.Integer(), Type.Null()], { description: 'null: no limit' }),
    hits: Type.Integer({ description: 'chunks found in the cache since the daemon started' }),
    misses: Type.Integer({
      description: 'chunks fetched from a registry since the daemon started',
    }),
    bytes_fetched: Type.Integer(),
  },
  { $id: 'CacheInfo' },
);
export type CacheInfoT = Static<typeof CacheInfo>;
export const CachePrune = Type.Object(
  {
    all: Type.Optional(
      Type.Boolean({ description: 'evict everything not in use, not just down to the limit' }),
    ),
  },
  strict,
);
export const CachePruneResult = Type.Object(
  {
    removed: Type.Array(CacheEntry),
    bytes: Type.Integer({ description: 'bytes the cache holds after' }),
  },
  { $id: 'CachePruneResult' },
);
export type CachePruneResultT = Static<typeof CachePruneResult>;
