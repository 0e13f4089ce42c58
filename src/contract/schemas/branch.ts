/**
 * The REST contract, branch, compaction, lineage and verification of snapshots.
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type, { type Static } from 'typebox';
import { strict } from './build.js';
import { FORK_MAX, POOL_MAX } from '../rules.js';
import { Labels } from './common.js';
import { EgressPolicy, ForkResult, idlePolicyRequest } from './sandboxes.js';
import { Snapshot, SnapshotTag } from './snapshots.js';

export const BranchMode = Type.Union([Type.Literal('copy'), Type.Literal('live')], {
  description:
    "copy: the written memory is copied while the source is stopped; live: the source is stopped only to take a copy-on-write view of its memory, copied after it resumed (`forkd doctor` says whether this host can). Default: the daemon's --branch-mode, by default live where the host can, else copy",
});
export type BranchModeT = Static<typeof BranchMode>;

export const BranchRequest = Type.Object(
  {
    tag: Type.Optional(SnapshotTag),
    fork: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: FORK_MAX,
        description: 'also fork this many children of it',
      }),
    ),
    labels: Type.Optional(Labels),
    no_wait: Type.Optional(
      Type.Boolean({
        description: 'answer once the source resumed; the snapshot is `writing` until checksummed',
      }),
    ),
    mode: Type.Optional(BranchMode),
    egress: Type.Optional(EgressPolicy),
    idle: Type.Optional(
      idlePolicyRequest(
        "the daemon's default",
        "with fork: the children's idle policy (docs/idle.md); not the source's, not inherited",
      ),
    ),
  },
  strict,
);
export type BranchRequestT = Static<typeof BranchRequest>;

export const BranchResult = Type.Object(
  {
    snapshot: Snapshot,
    mode: BranchMode,
    pause_ms: Type.Number({ description: 'the source was stopped this long (stop → cont)' }),
    captured_bytes: Type.Integer({
      description:
        'memory the source had written (0 in a `no_wait` live branch: its copy is still running)',
    }),
    timings: Type.Record(Type.String(), Type.Number()),
    children: Type.Optional(ForkResult),
  },
  { $id: 'BranchResult' },
);
export type BranchResultT = Static<typeof BranchResult>;

export const CompactSnapshot = Type.Object({ to: SnapshotTag }, strict);

export const LineageNode = Type.Object({
  kind: Type.Union([Type.Literal('image'), Type.Literal('snapshot'), Type.Literal('sandbox')]),
  id: Type.String(),
  parent: Type.Union([
    Type.Object({
      kind: Type.Union([Type.Literal('image'), Type.Literal('snapshot'), Type.Literal('sandbox')]),
      id: Type.String(),
    }),
    Type.Null(),
  ]),
  state: Type.String(),
  created_at: Type.String(),
});
export const Lineage = Type.Object(
  { nodes: Type.Array(LineageNode) },
  { $id: 'Lineage', description: 'every image, snapshot and live sandbox with its parent edge' },
);
export type LineageT = Static<typeof Lineage>;
export const LineageQuery = Type.Object({ tag: Type.Optional(SnapshotTag) }, strict);

export const VerifyResult = Type.Object({
  ok: Type.Boolean(),
  problems: Type.Array(Type.Object({ file: Type.String(), problem: Type.String() })),
});
export type VerifyResultT = Static<typeof VerifyResult>;

export const SetPool = Type.Object(
  {
    size: Type.Integer({ minimum: 0, maximum: POOL_MAX }),
    prewarm: Type.Optional(
      Type.Boolean({
        description:
          'restore each pool VM ahead of time, run one command in it and pause it: a fork then costs a resume, but the guest has run ~0.1 s past the snapshot',
      }),
    ),
  },
  strict,
);
