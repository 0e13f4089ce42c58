/**
 * The REST contract, snapshots: files, memory, origin, pool, create, remove, and builds.
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type, { type Static } from 'typebox';
import { between, strict } from './build.js';
import { LIMITS, NAME_PATTERN, USER_PATTERN } from '../rules.js';
import { Env, ErrorBody, ImageName, Labels } from './common.js';
import { EgressPolicy, NetworkMode } from './sandboxes.js';
import { BootKey } from './images.js';

export const SnapshotTag = Type.String({
  pattern: NAME_PATTERN,
  description: 'snapshot tag',
});

export const SnapshotFile = Type.Object({
  name: Type.String(),
  size: Type.Integer({ description: 'logical bytes' }),
  allocated: Type.Integer({ description: 'bytes allocated on disk' }),
  sha256: Type.String(),
});

/** How a snapshot's memory is stored: full, or a diff over its parent's (materialized for forks). */
export const SnapshotMemory = Type.Object({
  kind: Type.Union([Type.Literal('full'), Type.Literal('diff')]),
  parent: Type.Union([Type.String(), Type.Null()], {
    description: 'the snapshot whose memory a diff is over',
  }),
  logical_bytes: Type.Integer({ description: 'guest RAM size' }),
  stored_bytes: Type.Integer({ description: 'bytes its stored memory file takes on disk' }),
  materialized_bytes: Type.Integer({
    description:
      'bytes of the full file built from a diff for forks (cached, evictable; 0 when none)',
  }),
  depth: Type.Integer({ description: 'diffs read through to a full memory (0 = full)' }),
});

/** Where a snapshot came from when it was unpacked or pulled (docs/packs.md). */
export const SnapshotOrigin = Type.Object({
  kind: Type.Union([Type.Literal('pack'), Type.Literal('registry'), Type.Literal('url')]),
  from: Type.String({ description: 'the pack file, the reference pulled or the URL' }),
  digest: Type.Optional(
    Type.String({ description: "the pushed manifest's digest, or the pack file's sha256" }),
  ),
  at: Type.String({ format: 'date-time' }),
});
export type SnapshotOriginT = Static<typeof SnapshotOrigin>;

/**
 * A snapshot's pool of pre-started VMMs (docs/snapshots.md, "The VMM pool"): QEMUs that are
 * not sandboxes (`forkd ps` counts them apart), so what they take is shown here.
 */
/**
 * The host-wide pool budget (docs/snapshots.md, "The pool budget"): all pools' VMs together
 * stay within it, the least recently forked snapshots' pools giving way first.
 */
export const PoolBudgetState = Type.Object({
  vms: Type.Integer({ description: 'pool VMs allowed on this host, all snapshots together' }),
  memory_bytes: Type.Integer({ description: 'host memory allowed to them together' }),
  used_vms: Type.Integer({ description: 'pool VMs waiting or starting now' }),
  used_memory_bytes: Type.Integer({
    description: 'host memory the waiting pool VMs took when they became ready (measured ones)',
  }),
});
export type PoolBudgetStateT = Static<typeof PoolBudgetState>;

export const PoolState = Type.Object({
  size: Type.Integer({ description: 'pool VMs asked for' }),
  ready: Type.Integer({ description: 'pool VMs waiting now' }),
  prewarm: Type.Boolean(),
  memory_bytes: Type.Union([Type.Integer(), Type.Null()], {
    description: 'host memory the waiting VMs take together (null: not measured on this host)',
  }),
  held: Type.Optional(
    Type.Integer({
      description:
        "pool VMs of the size the host's pool budget holds back (other snapshots were forked more recently); its forks take the cold path meanwhile",
    }),
  ),
  budget: Type.Optional(PoolBudgetState),
});
export type PoolStateT = Static<typeof PoolState>;

export const Snapshot = Type.Object(
  {
    tag: SnapshotTag,
    state: Type.Union([Type.Literal('ready'), Type.Literal('writing'), Type.Literal('failed')]),
    bootable: Type.Boolean(),
    reason: Type.Optional(Type.String({ description: 'why it is not bootable or failed' })),
    image: Type.Union([Type.String(), Type.Null()]),
    parent: Type.Union([Type.String(), Type.Null()], { description: 'parent snapshot (chains)' }),
    source_sandbox: Type.Union([Type.String(), Type.Null()]),
    memory_mib: Type.Integer(),
    cpus: Type.Integer(),
    labels: Labels,
    created_at: Type.String({ format: 'date-time' }),
    kernel: Type.String(),
    qemu: Type.String(),
    files: Type.Array(SnapshotFile),
    logical_bytes: Type.Integer(),
    physical_bytes: Type.Integer(),
    children_alive: Type.Integer({
      description: 'running sandboxes forked from it (not a source branched into it)',
    }),
    pool: PoolState,
    depth: Type.Integer({
      description: 'layers of parent snapshots under its disk (0 = standalone)',
    }),
    ancestors: Type.Array(Type.String(), { description: 'parent, grandparent, …' }),
    dependents: Type.Array(Type.String(), { description: 'snapshots whose chain includes it' }),
    memory: Type.Optional(SnapshotMemory),
    origin: Type.Optional(SnapshotOrigin),
    boot: Type.Optional(BootKey),
    user: Type.Optional(
      Type.String({ description: 'the user its commands run as when they name none' }),
    ),
    workdir: Type.Optional(
      Type.String({ description: 'the directory its commands start in when they name none' }),
    ),
  },
  { $id: 'Snapshot' },
);
export type SnapshotT = Static<typeof Snapshot>;

/** POST /v1/builds: the build context is the body (a tar stream); the rest is the query. */
export const BuildQuery = Type.Object(
  {
    tag: Type.Optional(SnapshotTag),
    dockerfile: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 4096,
        description: "the Dockerfile's path in the context (default Dockerfile)",
      }),
    ),
    build_args: Type.Optional(
      Type.String({ maxLength: 65536, description: 'a JSON object of build args, {"K":"V"}' }),
    ),
    no_cache: Type.Optional(Type.Boolean()),
    no_cache_from: Type.Optional(
      Type.Integer({
        minimum: 1,
        description: 'run this step (1-based, after FROM) and later ones again',
      }),
    ),
    memory_mib: Type.Optional(Type.Integer(between(LIMITS.memoryMiB))),
    cpus: Type.Optional(Type.Integer(between(LIMITS.cpus))),
  },
  strict,
);
export type BuildQueryT = Static<typeof BuildQuery>;
export const PruneBuildsResult = Type.Object(
  { removed: Type.Array(Type.String(), { description: 'the step snapshots removed' }) },
  { $id: 'PruneBuildsResult' },
);
export const SnapshotList = Type.Object({ snapshots: Type.Array(Snapshot) });
export const SnapshotParams = Type.Object({ tag: SnapshotTag }, strict);

const GuestCommand = Type.String({ minLength: 1, maxLength: 65536, description: 'run with sh -c' });

export const CreateSnapshot = Type.Object(
  {
    tag: SnapshotTag,
    image: Type.Optional(ImageName),
    memory_mib: Type.Optional(Type.Integer(between(LIMITS.memoryMiB))),
    cpus: Type.Optional(Type.Integer(between(LIMITS.cpus))),
    env: Type.Optional(Env),
    warm: Type.Optional(
      Type.Array(GuestCommand, {
        maxItems: 64,
        description: 'run to completion, in order; a failure aborts',
      }),
    ),
    start: Type.Optional(
      Type.Array(GuestCommand, {
        maxItems: 64,
        description: 'started in the background and kept running inside the snapshot',
      }),
    ),
    wait_for: Type.Optional(
      Type.String({ minLength: 1, maxLength: 65536, description: 'retried until it exits 0' }),
    ),
    wait_port: Type.Optional(
      Type.Integer({
        ...between(LIMITS.waitPort),
        description: 'wait until a guest TCP port listens',
      }),
    ),
    wait_timeout_s: Type.Optional(Type.Integer(between(LIMITS.waitTimeoutS))),
    labels: Type.Optional(Labels),
    network: Type.Optional(NetworkMode),
    egress: Type.Optional(EgressPolicy),
    stream: Type.Optional(
      Type.Boolean({ description: 'answer with NDJSON progress events, then the snapshot' }),
    ),
    contexts: Type.Optional(
      Type.Array(Type.String({ pattern: NAME_PATTERN }), {
        maxItems: 16,
        description:
          'code contexts started in the parent, inherited by every fork ("node" is a Node context; any other name Python)',
      }),
    ),
    eval: Type.Optional(
      Type.Array(Type.String({ maxLength: 1048576 }), {
        maxItems: 64,
        description:
          'code run in the first context, in order (imports to keep warm); an error aborts',
      }),
    ),
    on_fork: Type.Optional(
      Type.Array(GuestCommand, {
        maxItems: 64,
        description:
          'run by the agent in every child right after its restore, before it is handed out',
      }),
    ),
    user: Type.Optional(
      Type.String({
        pattern: USER_PATTERN,
        description:
          "default user of its forks' commands and files (default: the image's User; else root)",
      }),
    ),
    workdir: Type.Optional(
      Type.String({
        pattern: '^/',
        maxLength: 4096,
        description:
          "default working directory of its forks' commands (default: the image's WorkingDir; else the user's home)",
      }),
    ),
  },
  strict,
);
export type CreateSnapshotT = Static<typeof CreateSnapshot>;

/**
 * Streaming snapshot create (application/x-ndjson): {"type":"progress","message"} lines,
 * then {"type":"done","snapshot":Snapshot} or {"type":"error","error":{code,message}}.
 */
export const SnapshotEvent = Type.Union(
  [
    Type.Object({ type: Type.Literal('progress'), message: Type.String() }),
    Type.Object({ type: Type.Literal('done'), snapshot: Snapshot }),
    Type.Object({ type: Type.Literal('error'), error: ErrorBody.properties.error }),
  ],
  { $id: 'SnapshotEvent' },
);

export const RemoveSnapshotQuery = Type.Object(
  {
    force: Type.Optional(Type.Boolean({ description: 'kill the sandboxes forked from it first' })),
    cascade: Type.Optional(
      Type.Boolean({ description: 'also remove every snapshot built on it, and their sandboxes' }),
    ),
  },
  strict,
);
