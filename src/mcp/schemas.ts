/**
 * The MCP tools' input and output schemas (JSON Schema, written in TypeBox). Inputs use the
 * TypeScript SDK's option names (the MCP server is a client of the SDK) and the contract's
 * names, patterns and limits (src/contract/), so a bad argument is refused here with the
 * same rule the daemon would apply. Outputs describe the SDK's result objects; every output
 * schema also admits `{ error: { code, message, details } }`, the catalog error a failed
 * call carries in its structuredContent.
 */
import Type, { type TInteger, type TObject, type TProperties, type TSchema } from 'typebox';
import { ContextName } from '../contract/contexts.js';
import { Env, GuestPath, ImageName, Labels, SnapshotTag } from '../contract/schemas.js';
import {
  FORK_MAX,
  LIMITS,
  NAME_PATTERN,
  SANDBOX_ID_PATTERN,
  USER_PATTERN,
  type IntRange,
} from '../contract/rules.js';

const strict = { additionalProperties: false } as const;
const opt = Type.Optional;

function int(range: IntRange, description: string): TInteger {
  return Type.Integer({ minimum: range.min, maximum: range.max, description });
}

/** An input object: no unknown fields. */
function input<P extends TProperties>(properties: P): TObject<P> {
  return Type.Object(properties, strict);
}

const sandboxId = Type.String({
  pattern: SANDBOX_ID_PATTERN,
  description: 'the sandbox id (sbx-…)',
});
const timeoutMs = int(
  { min: 1000, max: LIMITS.timeoutS.max * 1000 },
  'kill the sandbox after this long (ms); default: the daemon default',
);
const idleAfter = (what: string) =>
  opt(
    Type.Union([Type.Integer({ minimum: 0, maximum: LIMITS.idleAfterS.max * 1000 }), Type.Null()], {
      description: `${what} after this long without a request (ms, rounded up to seconds); 0 or null: never; default: the daemon's`,
    }),
  );
/** When a sandbox is paused while nobody uses it (the SDK's IdleOptions; docs/idle.md). */
const idle = opt(
  Type.Object(
    {
      pauseAfterMs: idleAfter('pause it (no CPU; any request wakes it)'),
      hibernateAfterMs: idleAfter('hibernate it (on disk, no memory; larger than the pause)'),
    },
    {
      ...strict,
      description:
        'pause the sandbox when idle, to save the host CPU and memory; any later call wakes it transparently',
    },
  ),
);
const resources = {
  memoryMib: opt(int(LIMITS.memoryMiB, 'guest RAM in MiB (default 256)')),
  cpus: opt(int(LIMITS.cpus, 'vCPUs (default 1)')),
};
const encoding = Type.Union([Type.Literal('utf8'), Type.Literal('base64')], {
  description: 'utf8 (default) for text, base64 for binary content',
});

// ---- outputs: the SDK's objects ------------------------------------------------------

const Nullable = (s: TSchema) => Type.Union([s, Type.Null()]);

export const SandboxOut = Type.Object({
  id: Type.String(),
  state: Type.String({ description: 'starting, running, stopped or dead' }),
  image: Nullable(Type.String()),
  snapshot: Nullable(Type.String({ description: 'the snapshot it was forked from' })),
  parent: Nullable(Type.String()),
  memoryMib: Type.Integer(),
  cpus: Type.Integer(),
  labels: Type.Record(Type.String(), Type.String()),
  createdAt: Type.String(),
  expiresAt: Nullable(Type.String()),
  pid: Nullable(Type.Integer()),
  reason: opt(Type.String()),
  tier: opt(
    Type.String({
      description:
        'running, paused, hibernated or halted (any call wakes a sandbox that is not running)',
    }),
  ),
  idle: opt(
    Type.Object({
      pauseAfterMs: Nullable(Type.Number()),
      hibernateAfterMs: Nullable(Type.Number()),
      source: Type.String({ description: "sandbox (its own) or daemon (the daemon's defaults)" }),
    }),
  ),
});

export const SnapshotOut = Type.Object({
  tag: Type.String(),
  state: Type.String({ description: 'ready, writing or failed' }),
  bootable: Type.Boolean(),
  reason: opt(Type.String()),
  image: Nullable(Type.String()),
  parent: Nullable(Type.String({ description: 'the snapshot its disk chains on' })),
  sourceSandbox: Nullable(Type.String({ description: 'the sandbox a branch captured' })),
  memoryMib: Type.Integer(),
  cpus: Type.Integer(),
  labels: Type.Record(Type.String(), Type.String()),
  createdAt: Type.String(),
  logicalBytes: Type.Number(),
  physicalBytes: Type.Number(),
  childrenAlive: Type.Integer(),
  depth: Type.Integer(),
  ancestors: Type.Array(Type.String()),
  dependents: Type.Array(Type.String()),
});

const ErrorOut = Type.Object({
  code: Type.String({ description: 'the catalog code (docs/errors.md)' }),
  message: Type.String(),
  details: opt(Type.Record(Type.String(), Type.Unknown())),
});

const ForkOut = Type.Object({
  sandboxes: Type.Array(SandboxOut),
  failed: Type.Array(Type.Object({ index: Type.Integer(), error: ErrorOut })),
});

const EntryOut = Type.Object({
  name: Type.String(),
  kind: Type.String({ description: 'file, dir, symlink or other' }),
  size: Type.Number(),
  mode: Type.Integer(),
  mtimeMs: Type.Number(),
});

const Kind = Type.String({ description: 'image, snapshot or sandbox' });
const LineageNodeOut = Type.Object({
  kind: Kind,
  id: Type.String(),
  parent: Nullable(Type.Object({ kind: Kind, id: Type.String() })),
  state: Type.String(),
  createdAt: Type.String(),
});

/**
 * A tool's declared output: its success object, or the error object. MCP wants an object
 * schema at the root, so the two are alternatives under one `type: object`.
 */
function outcome(success: TObject): Record<string, unknown> {
  return {
    type: 'object',
    anyOf: [success, Type.Object({ error: ErrorOut }, { required: ['error'] })],
  };
}

// ---- the tools' schemas ----------------------------------------------------------------

/** sandbox_eval (and its alias sandbox_run_code): code evaluated in a context. */
const EVAL = {
  input: input({
    sandboxId,
    code: Type.String({ minLength: 1, maxLength: 1048576, description: 'Python source to run' }),
    context: opt(ContextName),
    timeoutMs: opt(int(LIMITS.execTimeoutMs, 'interrupt the code after this long (ms)')),
  }),
  output: Type.Object({
    text: Nullable(Type.String({ description: "the last expression's value (text/plain)" })),
    results: Type.Array(
      Type.Object({
        isMainResult: Type.Boolean(),
        data: Type.Record(Type.String(), Type.Unknown(), {
          description: 'MIME type → value (images base64, application/json parsed)',
        }),
      }),
    ),
    stdout: Type.String(),
    stderr: Type.String(),
    error: Nullable(
      Type.Object({ name: Type.String(), value: Type.String(), traceback: Type.String() }),
    ),
    executionCount: Type.Integer(),
    durationMs: Type.Number(),
  }),
};

export const SCHEMAS = {
  sandbox_create: {
    input: input({
      image: opt(
        Type.String({ pattern: NAME_PATTERN, description: 'boot this image (default busybox)' }),
      ),
      snapshot: opt(
        Type.String({
          pattern: NAME_PATTERN,
          description: 'start warm from this snapshot instead of booting an image',
        }),
      ),
      ...resources,
      env: opt(Env),
      timeoutMs: opt(timeoutMs),
      labels: opt(Labels),
      idle,
    }),
    output: Type.Object({ sandbox: SandboxOut }),
  },
  sandbox_list: {
    input: input({
      state: opt(
        Type.Union(
          ['starting', 'running', 'stopped', 'dead'].map((s) => Type.Literal(s)),
          {
            description: 'only sandboxes in this state (default: live ones)',
          },
        ),
      ),
      label: opt(Type.String({ maxLength: 320, description: 'only those with label KEY=VALUE' })),
    }),
    output: Type.Object({ sandboxes: Type.Array(SandboxOut) }),
  },
  sandbox_exec: {
    input: input({
      sandboxId,
      command: Type.Union(
        [
          Type.String({ minLength: 1, maxLength: 131072, description: 'run with sh -c' }),
          Type.Array(Type.String({ maxLength: 131072 }), { minItems: 1, maxItems: 4096 }),
        ],
        { description: 'a shell command line, or an argv array run as is' },
      ),
      cwd: opt(GuestPath),
      env: opt(Env),
      user: opt(Type.String({ pattern: USER_PATTERN, description: 'user name or uid' })),
      timeoutMs: opt(int(LIMITS.execTimeoutMs, 'kill the command after this long (ms)')),
      stdin: opt(Type.String({ maxLength: 1024 * 1024, description: 'text given to stdin' })),
    }),
    output: Type.Object({
      exitCode: Nullable(Type.Integer()),
      signal: Nullable(Type.String()),
      timedOut: Type.Boolean(),
      durationMs: Type.Number(),
      stdout: Type.String(),
      stderr: Type.String(),
    }),
  },
  sandbox_eval: EVAL,
  /** The former name of sandbox_eval, kept as an alias. */
  sandbox_run_code: EVAL,
  files_read: {
    input: input({ sandboxId, path: GuestPath, encoding: opt(encoding) }),
    output: Type.Object({
      path: Type.String(),
      size: Type.Integer(),
      encoding,
      content: Type.String(),
    }),
  },
  files_write: {
    input: input({
      sandboxId,
      path: GuestPath,
      content: Type.String({ maxLength: 1024 * 1024 }),
      encoding: opt(encoding),
      mode: opt(Type.Integer({ minimum: 0, maximum: 0o7777, description: 'e.g. 493 for 0755' })),
      parents: opt(Type.Boolean({ description: 'create missing parent directories' })),
    }),
    output: Type.Object({ path: Type.String(), size: Type.Integer() }),
  },
  files_list: {
    input: input({ sandboxId, path: GuestPath }),
    output: Type.Object({ path: Type.String(), entries: Type.Array(EntryOut) }),
  },
  snapshot_create: {
    input: input({
      tag: SnapshotTag,
      image: opt(ImageName),
      ...resources,
      env: opt(Env),
      warm: opt(
        Type.Array(Type.String({ minLength: 1, maxLength: 65536 }), {
          maxItems: 64,
          description: 'commands run to completion, in order, before the capture',
        }),
      ),
      start: opt(
        Type.Array(Type.String({ minLength: 1, maxLength: 65536 }), {
          maxItems: 64,
          description: 'commands started in the background and kept running in the snapshot',
        }),
      ),
      waitFor: opt(Type.String({ minLength: 1, maxLength: 65536, description: 'retried until 0' })),
      waitPort: opt(int(LIMITS.waitPort, 'wait until this guest TCP port listens')),
      waitTimeoutMs: opt(
        int(
          { min: LIMITS.waitTimeoutS.min * 1000, max: LIMITS.waitTimeoutS.max * 1000 },
          'how long to wait for waitFor/waitPort (ms)',
        ),
      ),
      labels: opt(Labels),
    }),
    output: Type.Object({ snapshot: SnapshotOut }),
  },
  template_build: {
    input: input({
      dockerfile: Type.String({
        minLength: 1,
        maxLength: 65536,
        description:
          'the Dockerfile: FROM (an image, a snapshot tag or a registry reference), RUN, COPY, ENV, WORKDIR, USER, CMD…, and `# forkd:start --wait-port=N CMD` to leave a server running in the snapshot',
      }),
      files: opt(
        Type.Record(
          Type.String({ minLength: 1, maxLength: 100 }),
          Type.String({ maxLength: 1048576 }),
          {
            description: 'the build context: relative path → text content, for COPY',
          },
        ),
      ),
      tag: opt(SnapshotTag),
      buildArgs: opt(Type.Record(Type.String(), Type.String())),
      noCache: opt(Type.Boolean({ description: 'run every step again' })),
    }),
    output: Type.Object({
      tag: Type.Union([Type.String(), Type.Null()]),
      snapshot: Type.Union([Type.String(), Type.Null()]),
      steps: Type.Array(
        Type.Object({
          step: Type.Integer(),
          instruction: Type.String(),
          status: Type.String(),
          durationMs: Type.Number(),
        }),
      ),
      durationMs: Type.Number(),
    }),
  },
  snapshot_list: {
    input: input({}),
    output: Type.Object({ snapshots: Type.Array(SnapshotOut) }),
  },
  sandbox_fork: {
    input: input({
      snapshot: Type.String({
        minLength: 1,
        maxLength: 1024,
        description:
          'snapshot tag, or an OCI reference (REGISTRY/REPO:TAG) that the first fork pulls onto this node',
      }),
      n: Type.Integer({ minimum: 1, maximum: FORK_MAX, description: 'how many sandboxes' }),
      env: opt(Env),
      labels: opt(Labels),
      timeoutMs: opt(timeoutMs),
      allOrNothing: opt(
        Type.Boolean({ description: 'if any child fails, kill the healthy ones too' }),
      ),
      idle,
    }),
    output: ForkOut,
  },
  sandbox_branch: {
    input: input({
      sandboxId,
      tag: opt(
        Type.String({ pattern: NAME_PATTERN, description: 'the new snapshot (default: made up)' }),
      ),
      fork: opt(
        Type.Integer({ minimum: 0, maximum: FORK_MAX, description: 'also fork this many' }),
      ),
      labels: opt(Labels),
      mode: opt(
        Type.Union([Type.Literal('copy'), Type.Literal('live')], {
          description: 'how to capture (default: the daemon picks)',
        }),
      ),
      idle,
    }),
    output: Type.Object({
      snapshot: SnapshotOut,
      mode: Type.String(),
      pauseMs: Type.Number({ description: 'how long the source sandbox was paused' }),
      capturedBytes: Type.Number(),
      children: opt(ForkOut),
    }),
  },
  lineage_show: {
    input: input({
      tag: opt(Type.String({ pattern: NAME_PATTERN, description: 'only this subtree' })),
    }),
    output: Type.Object({ nodes: Type.Array(LineageNodeOut) }),
  },
  sandbox_kill: {
    input: input({ sandboxId }),
    output: Type.Object({ sandboxId: Type.String(), killed: Type.Boolean() }),
  },
  snapshot_remove: {
    input: input({
      tag: SnapshotTag,
      force: opt(Type.Boolean({ description: 'kill live sandboxes forked from it first' })),
      cascade: opt(Type.Boolean({ description: 'also remove the snapshots chained on it' })),
    }),
    output: Type.Object({ tag: Type.String(), removed: Type.Boolean() }),
  },
} satisfies Record<string, { input: TObject; output: TObject }>;

export type ToolName = keyof typeof SCHEMAS;

/** The output schema a tool declares (success or error). */
export function outputSchemaOf(name: ToolName): Record<string, unknown> {
  return outcome(SCHEMAS[name].output);
}
