/**
 * The REST contract, written once (TypeBox): Fastify validates requests with it, the
 * OpenAPI document (docs/openapi.json) is generated from it, and the SDK's types mirror it.
 * Requests reject unknown fields; clients ignore unknown response fields.
 */
import Type, { type Static, type TSchema } from 'typebox';
import {
  ENV_MAX,
  ENV_NAME_PATTERN,
  EXEC_ID_PATTERN,
  FORK_MAX,
  LABEL_KEY_PATTERN,
  LABELS_MAX,
  LIMIT_RANGES,
  LIMITS,
  NAME_PATTERN,
  POOL_MAX,
  SANDBOX_ID_PATTERN,
  SIGNALS,
  USER_PATTERN,
} from './rules.js';

const strict = { additionalProperties: false } as const;

/** A rules.ts range as JSON-schema bounds. */
function between(range: { min: number; max: number }): { minimum: number; maximum: number } {
  return { minimum: range.min, maximum: range.max };
}

/** Ids and names: no `/`, `..`, NUL or whitespace; bounded length. */
export const SandboxId = Type.String({ pattern: SANDBOX_ID_PATTERN, description: 'sandbox id' });
export const ImageName = Type.String({
  pattern: NAME_PATTERN,
  description: 'image name',
});
export const ExecId = Type.String({
  pattern: EXEC_ID_PATTERN,
  description: 'exec id (streaming exec)',
});
/** An absolute guest path, at most 4096 bytes, no NUL. */
export const GuestPath = Type.String({ pattern: '^/[^\\u0000]*$', maxLength: 4096 });

const LabelKey = LABEL_KEY_PATTERN;
export const Labels = Type.Record(
  Type.String({ pattern: LabelKey }),
  Type.String({ maxLength: LABELS_MAX.valueLength }),
  {
    maxProperties: LABELS_MAX.count,
    additionalProperties: false,
    description: 'free-form key → value labels',
  },
);
const EnvName = ENV_NAME_PATTERN;
export const Env = Type.Record(
  Type.String({ pattern: EnvName }),
  Type.String({ maxLength: ENV_MAX.valueLength }),
  {
    maxProperties: ENV_MAX.count,
    additionalProperties: false,
  },
);

// ---- errors ---------------------------------------------------------------------------

export const ErrorBody = Type.Object(
  {
    error: Type.Object({
      code: Type.String(),
      message: Type.String(),
      details: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    }),
  },
  { $id: 'Error' },
);

// ---- sandboxes ------------------------------------------------------------------------

export const SandboxState = Type.Union(
  [
    Type.Literal('starting'),
    Type.Literal('running'),
    Type.Literal('stopped'),
    Type.Literal('dead'),
  ],
  { description: 'starting → running → stopped (killed by request or timeout) | dead (QEMU died)' },
);

/** How awake a running sandbox is (docs/idle.md); `state` stays `running` while it is parked. */
export const SandboxTier = Type.Union(
  [Type.Literal('running'), Type.Literal('paused'), Type.Literal('hibernated')],
  {
    description:
      'running | paused (QEMU stopped: no CPU) | hibernated (captured to disk, no QEMU); any request wakes it',
  },
);

/** Seconds without a request before an idle tier; 0 or null: never. */
const IdleAfter = (what: string, leftOut: string) =>
  Type.Optional(
    Type.Union([Type.Integer(between(LIMITS.idleAfterS)), Type.Null()], {
      description: `${what} after this many seconds without a request; 0 or null: never; left out: ${leftOut}`,
    }),
  );

/** An idle policy asked for: the same two times on a create, a fork and a change. */
const idlePolicyRequest = (leftOut: string, description: string) =>
  Type.Object(
    {
      pause_after_s: IdleAfter('pause it', leftOut),
      hibernate_after_s: IdleAfter(
        'hibernate it (larger than pause_after_s when both are set)',
        leftOut,
      ),
    },
    { ...strict, description },
  );

/** A sandbox's idle policy asked for on create or fork (docs/idle.md). */
export const IdlePolicyRequest = idlePolicyRequest(
  "the daemon's default",
  "when it parks itself (docs/idle.md); a fork does not inherit its snapshot's source's policy",
);

/** A new idle policy for a running sandbox (PATCH; docs/idle.md). */
export const IdlePolicyChange = idlePolicyRequest(
  'its value now',
  'its new idle policy, at once (docs/idle.md): a parked sandbox keeps its tier, the times count from now',
);

/** The idle policy a sandbox has (its own, else the daemon's defaults). */
export const IdlePolicy = Type.Object(
  {
    pause_after_s: Type.Union([Type.Integer(), Type.Null()], {
      description: 'paused after this many seconds without a request; null: never',
    }),
    hibernate_after_s: Type.Union([Type.Integer(), Type.Null()], {
      description: 'hibernated after this many seconds without a request; null: never',
    }),
    source: Type.Union([Type.Literal('sandbox'), Type.Literal('daemon')], {
      description:
        "sandbox: asked for on its create or fork, or changed since; daemon: the daemon's defaults",
    }),
  },
  { description: 'when it parks itself (docs/idle.md)' },
);

export const NetworkMode = Type.Union([Type.Literal('none'), Type.Literal('nat')], {
  description: "`nat` (default): a NIC with NAT in the sandbox's own namespace; `none`: no NIC",
});
export const EgressEntry = Type.String({
  minLength: 1,
  maxLength: 260,
  description: 'a CIDR, an IPv4 address, a hostname or `*.domain`, each optionally with `:port`',
});
export const EgressPolicy = Type.Union(
  [
    Type.Literal('none'),
    Type.Object(
      {
        allow_internet: Type.Optional(
          Type.Boolean({ description: 'public addresses not on a list (default true)' }),
        ),
        allow_out: Type.Optional(Type.Array(EgressEntry, { maxItems: 256 })),
        deny_out: Type.Optional(
          Type.Array(EgressEntry, { maxItems: 256, description: 'wins over allow_out' }),
        ),
      },
      strict,
    ),
  ],
  {
    description:
      'egress policy: `none` (nothing out, DNS refused) or lists; fields not given are inherited',
  },
);
export const Egress = Type.Object({
  none: Type.Boolean(),
  allow_internet: Type.Boolean(),
  allow_out: Type.Array(Type.String()),
  deny_out: Type.Array(Type.String()),
});
export const PublishedPort = Type.Object({
  port: Type.Integer({ description: 'guest port' }),
  host_port: Type.Integer(),
  host: Type.String({ description: 'host address it listens on' }),
});
export const SandboxNetwork = Type.Object(
  {
    mode: NetworkMode,
    isolation: Type.Optional(
      Type.Union([Type.Literal('netns'), Type.Literal('user')], {
        description:
          "`netns`: own namespace, policy enforced; `user`: rootless user networking in the daemon's namespace, no policy",
      }),
    ),
    egress: Egress,
    address: Type.Optional(Type.String({ description: 'guest IPv4 address (same in every fork)' })),
    denied: Type.Integer({ description: 'connections and DNS queries refused so far' }),
    ports: Type.Array(PublishedPort),
  },
  { $id: 'SandboxNetwork' },
);
export const PatchNetwork = Type.Object({ egress: EgressPolicy }, strict);
export const PublishPort = Type.Object(
  {
    port: Type.Integer({ minimum: 1, maximum: 65535, description: 'guest port' }),
    host_port: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 65535, description: 'default: a free one' }),
    ),
  },
  strict,
);
export const PortParams = Type.Object(
  {
    id: SandboxId,
    port: Type.String({ pattern: '^[1-9][0-9]{0,4}$', description: 'guest port, 1–65535' }),
  },
  strict,
);
export const PortList = Type.Object({ ports: Type.Array(PublishedPort) });

export const Sandbox = Type.Object(
  {
    id: SandboxId,
    state: SandboxState,
    image: Type.Union([Type.String(), Type.Null()]),
    snapshot: Type.Union([Type.String(), Type.Null()], {
      description: 'snapshot it was forked from',
    }),
    parent: Type.Union([Type.String(), Type.Null()], { description: 'sandbox it descends from' }),
    memory_mib: Type.Integer(),
    cpus: Type.Integer(),
    labels: Labels,
    created_at: Type.String({ format: 'date-time' }),
    expires_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    pid: Type.Union([Type.Integer(), Type.Null()], { description: 'host pid of its QEMU' }),
    reason: Type.Optional(
      Type.String({
        description:
          'why it is stopped or dead; on a running sandbox, why its disk chain is broken and the command that fixes it',
      }),
    ),
    network: Type.Optional(
      Type.Object({ mode: NetworkMode, egress: Egress }, { description: 'while it runs' }),
    ),
    limits: Type.Optional(
      Type.Object(
        {
          memory_bytes: Type.Union([Type.Integer(), Type.Null()], {
            description: 'cap on the QEMU process: guest RAM plus QEMU overhead (null: none)',
          }),
          cpu: Type.Union([Type.Number(), Type.Null()], {
            description: 'CPU quota in cores (null: none)',
          }),
          pids: Type.Union([Type.Integer(), Type.Null()], {
            description: "cap on QEMU's threads and processes (null: none)",
          }),
          cgroup: Type.Union([Type.Literal('v1'), Type.Literal('v2'), Type.Null()], {
            description: 'the cgroup version enforcing them; null: this host cannot (forkd doctor)',
          }),
        },
        { description: 'resource limits of its QEMU on the host (docs/limits.md)' },
      ),
    ),
    usage: Type.Optional(
      Type.Object(
        {
          cpu_seconds: Type.Number({ description: 'CPU time its QEMU used' }),
          memory_bytes: Type.Integer({ description: 'memory charged to its cgroup now' }),
          throttled_seconds: Type.Number({ description: 'CPU time its quota held back' }),
          oom_kills: Type.Integer({ description: 'kills by the host OOM killer at its limit' }),
        },
        { description: 'what a running sandbox uses (GET of one sandbox only)' },
      ),
    ),
    unenforced: Type.Optional(
      Type.Array(
        Type.Union([
          Type.Literal('network'),
          Type.Literal('names'),
          Type.Literal('limits'),
          Type.Literal('confinement'),
        ]),
        {
          description:
            'while it runs, what it asks that this host does not enforce (started under `forkd daemon --accept-unenforced`); empty: everything is (docs/security.md)',
        },
      ),
    ),
    confinement: Type.Optional(
      Type.Object(
        {
          uid: Type.Integer({ description: 'the effective uid its QEMU runs as' }),
          seccomp: Type.Boolean({ description: 'a seccomp filter is in force (mode 2)' }),
          sandbox: Type.Union([Type.String(), Type.Null()], {
            description: "QEMU's -sandbox option; null: none",
          }),
          spawn: Type.Boolean({ description: 'its filter allows process creation (live branch)' }),
          capabilities: Type.String({
            description: 'effective capabilities in hex (all zeros: none)',
          }),
          namespaces: Type.Array(Type.Union([Type.Literal('mount'), Type.Literal('ipc')]), {
            description:
              'the namespaces its QEMU has of its own beside the network one: `mount` (its jail: a root holding only its files) and `ipc`',
          }),
        },
        {
          description:
            'how its QEMU is confined, read from the kernel (GET of one running sandbox; docs/security.md)',
        },
      ),
    ),
    tier: Type.Optional(SandboxTier),
    idle: Type.Optional(IdlePolicy),
  },
  { $id: 'Sandbox' },
);

/** Resource limits asked for on create or fork; a fork inherits its snapshot's. */
export const LimitsRequest = Type.Object(
  {
    memory: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 32,
        description:
          "cap on the sandbox's QEMU process (guest RAM plus QEMU overhead): a number and a unit K, M, G or T (powers of 1024), e.g. 768M; at least the guest's RAM",
      }),
    ),
    cpu: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        maximum: LIMIT_RANGES.cpu.max,
        description: "CPU quota in cores, e.g. 0.5; at most the host's cores",
      }),
    ),
    pids: Type.Optional(
      Type.Integer({
        ...between(LIMIT_RANGES.pids),
        description: "cap on the QEMU process's threads (not the guest's processes)",
      }),
    ),
  },
  { ...strict, description: 'resource limits (docs/limits.md)' },
);

export const CreateSandbox = Type.Object(
  {
    image: Type.Optional(ImageName),
    memory_mib: Type.Optional(Type.Integer(between(LIMITS.memoryMiB))),
    cpus: Type.Optional(Type.Integer(between(LIMITS.cpus))),
    env: Type.Optional(Env),
    timeout_s: Type.Optional(Type.Integer(between(LIMITS.timeoutS))),
    labels: Type.Optional(Labels),
    snapshot: Type.Optional(
      Type.String({
        // A tag, or an OCI reference (REGISTRY/REPO[:TAG][@DIGEST]) the daemon pulls once.
        pattern: `${NAME_PATTERN}|^[a-z0-9][\\w.:-]*(/[\\w.-]+)+(:[\\w][\\w.-]{0,127})?(@sha256:[a-f0-9]{64})?$`,
        maxLength: 1024,
        description:
          'fork from this snapshot instead of booting an image (no image/memory_mib/cpus then): a tag, or an OCI reference the first fork pulls (docs/packs.md)',
      }),
    ),
    n: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: FORK_MAX,
        description: 'with snapshot: fork this many; the answer is then a ForkResult',
      }),
    ),
    all_or_nothing: Type.Optional(
      Type.Boolean({ description: 'with n: if any child fails, kill the healthy ones too' }),
    ),
    network: Type.Optional(NetworkMode),
    egress: Type.Optional(EgressPolicy),
    limits: Type.Optional(LimitsRequest),
    idle: Type.Optional(IdlePolicyRequest),
    netns: Type.Optional(
      Type.String({
        pattern: '^/[^\\0]*$',
        maxLength: 4096,
        description:
          "with snapshot (network nat): run the child's QEMU in this network namespace (a path, as a Kubernetes pod's) instead of one of forkd's: the guest's traffic leaves from the namespace's addresses; forkd applies no egress policy there",
      }),
    ),
    forward_ports: Type.Optional(
      Type.Array(Type.Integer({ minimum: 1, maximum: 65535 }), {
        maxItems: 64,
        description:
          'with netns: guest TCP ports QEMU forwards from every address of that namespace (the same port number)',
      }),
    ),
    cold: Type.Optional(
      Type.Boolean({
        description:
          "boot the image's kernel for real instead of forking its boot snapshot (docs/snapshots.md)",
      }),
    ),
  },
  strict,
);

/** The answer to a fork of n children: who came up, who did not and why. */
export const ForkResult = Type.Object(
  {
    sandboxes: Type.Array(Sandbox),
    failed: Type.Array(Type.Object({ index: Type.Integer(), error: ErrorBody.properties.error })),
  },
  { $id: 'ForkResult' },
);

export const PatchSandbox = Type.Object(
  {
    timeout_s: Type.Optional(
      Type.Integer({
        ...between(LIMITS.timeoutS),
        description: 'the sandbox now expires this many seconds from now',
      }),
    ),
    limits: Type.Optional(LimitsRequest),
    idle: Type.Optional(
      Type.Union([IdlePolicyChange, Type.Null()], {
        description:
          "its new idle policy (times left out keep their value now); null: it follows the daemon's defaults again",
      }),
    ),
  },
  { ...strict, minProperties: 1, description: 'timeout_s, limits, idle, or any of them' },
);

export const ListSandboxesQuery = Type.Object(
  {
    state: Type.Optional(SandboxState),
    label: Type.Optional(
      Type.String({
        pattern: `${LabelKey.slice(0, -1)}=.{0,256}$`,
        description: 'key=value; only sandboxes with that label',
      }),
    ),
  },
  strict,
);

export const SandboxList = Type.Object({ sandboxes: Type.Array(Sandbox) });

export const SandboxParams = Type.Object({ id: SandboxId }, strict);

/** POST /v1/sandboxes/:id/pause: park a sandbox in a tier (default paused). */
export const PauseSandbox = Type.Object(
  {
    tier: Type.Optional(
      Type.Union([Type.Literal('paused'), Type.Literal('hibernated')], {
        description: 'paused (default): QEMU stopped; hibernated: captured to disk, QEMU ended',
      }),
    ),
  },
  strict,
);

// ---- exec ----------------------------------------------------------------------------

export const ExecRequest = Type.Object(
  {
    argv: Type.Array(Type.String({ maxLength: 131072 }), { minItems: 1, maxItems: 4096 }),
    env: Type.Optional(Env),
    cwd: Type.Optional(GuestPath),
    user: Type.Optional(Type.String({ pattern: USER_PATTERN })),
    timeout_ms: Type.Optional(Type.Integer(between(LIMITS.execTimeoutMs))),
    stdin: Type.Optional(
      Type.String({
        pattern: '^[A-Za-z0-9+/]*={0,2}$',
        description: 'base64 bytes given to stdin, then EOF',
      }),
    ),
    stream: Type.Optional(
      Type.Boolean({ description: 'answer with NDJSON events as output is produced' }),
    ),
    keep_stdin_open: Type.Optional(
      Type.Boolean({
        description: 'streaming only: stdin stays open for POST /execs/:exec_id/stdin',
      }),
    ),
  },
  strict,
);

/** Buffered exec answer. stdout/stderr are base64. */
export const ExecResult = Type.Object(
  {
    exit_code: Type.Union([Type.Integer(), Type.Null()]),
    signal: Type.Union([Type.String(), Type.Null()]),
    timed_out: Type.Boolean(),
    duration_ms: Type.Number(),
    stdout: Type.String({ description: 'base64' }),
    stderr: Type.String({ description: 'base64' }),
  },
  { $id: 'ExecResult' },
);

/**
 * Streaming exec answer (application/x-ndjson), one event per line:
 * {"type":"started","exec_id","pid"} · {"type":"stdout"|"stderr","data":base64} ·
 * {"type":"exit","exit_code","signal","timed_out","duration_ms"} · {"type":"error","error":{code,message}}
 */
export const ExecEvent = Type.Union(
  [
    Type.Object({ type: Type.Literal('started'), exec_id: ExecId, pid: Type.Integer() }),
    Type.Object({ type: Type.Literal('stdout'), data: Type.String() }),
    Type.Object({ type: Type.Literal('stderr'), data: Type.String() }),
    Type.Object({
      type: Type.Literal('exit'),
      exit_code: Type.Union([Type.Integer(), Type.Null()]),
      signal: Type.Union([Type.String(), Type.Null()]),
      timed_out: Type.Boolean(),
      duration_ms: Type.Number(),
    }),
    Type.Object({ type: Type.Literal('error'), error: ErrorBody.properties.error }),
  ],
  { $id: 'ExecEvent' },
);

export const ExecParams = Type.Object({ id: SandboxId, exec_id: ExecId }, strict);
export const StdinQuery = Type.Object({ eof: Type.Optional(Type.Boolean()) }, strict);
export const KillExec = Type.Object(
  {
    signal: Type.Optional(Type.Union(SIGNALS.map((s) => Type.Literal(s)))),
  },
  strict,
);

// ---- files ---------------------------------------------------------------------------

export const PathQuery = Type.Object({ path: GuestPath }, strict);
export const PutFileQuery = Type.Object(
  {
    path: GuestPath,
    mode: Type.Optional(Type.Integer({ minimum: 0, maximum: 0o7777 })),
    parents: Type.Optional(Type.Boolean()),
    user: Type.Optional(
      Type.String({
        pattern: USER_PATTERN,
        description:
          "guest user it (and the directories it creates) belongs to (default: the sandbox's default user, else root)",
      }),
    ),
  },
  strict,
);
export const RemoveQuery = Type.Object(
  { path: GuestPath, recursive: Type.Optional(Type.Boolean()) },
  strict,
);
export const Mkdir = Type.Object(
  {
    path: GuestPath,
    parents: Type.Optional(Type.Boolean()),
    mode: Type.Optional(Type.Integer({ minimum: 0, maximum: 0o7777 })),
    user: Type.Optional(
      Type.String({
        pattern: USER_PATTERN,
        description:
          "guest user it (and the directories it creates) belongs to (default: the sandbox's default user, else root)",
      }),
    ),
  },
  strict,
);
export const FileStat = Type.Object(
  {
    name: Type.String(),
    kind: Type.Union([
      Type.Literal('file'),
      Type.Literal('dir'),
      Type.Literal('symlink'),
      Type.Literal('other'),
    ]),
    size: Type.Integer(),
    mode: Type.Integer(),
    mtime_ms: Type.Number(),
    owner: Type.Optional(Type.String({ description: 'owning user (name, else uid)' })),
    group: Type.Optional(Type.String({ description: 'owning group (name, else gid)' })),
  },
  { $id: 'FileStat' },
);
/** Who a call acts as in a guest: a user, its home, where its commands start by default. */
export const GuestUser = Type.Object({
  name: Type.String(),
  uid: Type.Integer(),
  gid: Type.Integer(),
  home: Type.String(),
  cwd: Type.String(),
});
export const FileList = Type.Object({ entries: Type.Array(FileStat) });
export const WriteResult = Type.Object({ size: Type.Integer() });

// ---- images --------------------------------------------------------------------------

/** An OCI image's config as a sandbox's defaults (images pulled or imported). */
export const ImageConfig = Type.Object({
  env: Type.Array(Type.String(), { description: 'KEY=VALUE entries' }),
  working_dir: Type.Optional(Type.String()),
  user: Type.Optional(Type.String()),
  entrypoint: Type.Optional(Type.Array(Type.String())),
  cmd: Type.Optional(Type.Array(Type.String())),
});
/** What a boot snapshot is valid for: every field must equal a start's for it to be used. */
export const BootKey = Type.Object(
  {
    image: Type.String(),
    image_id: Type.String({ description: "the image's content identity" }),
    kernel: Type.String(),
    guest_id: Type.String({ description: 'identity of the kernel, initramfs and agent files' }),
    qemu: Type.String(),
    machine: Type.String(),
    accel: Type.Union([Type.Literal('kvm'), Type.Literal('tcg')]),
    memory_mib: Type.Integer(),
    cpus: Type.Integer(),
    network: NetworkMode,
  },
  { description: 'set on a boot snapshot: what it is valid for' },
);

/** One boot snapshot of an image, as `forkd images` shows it. */
export const BootSnapshotRef = Type.Object({
  tag: Type.String(),
  memory_mib: Type.Integer(),
  cpus: Type.Integer(),
  network: NetworkMode,
  physical_bytes: Type.Integer(),
  current: Type.Boolean({ description: 'whether it matches the image as it is now' }),
});

export const Image = Type.Object(
  {
    name: ImageName,
    format: Type.String(),
    size_bytes: Type.Integer(),
    disk_bytes: Type.Integer(),
    created_at: Type.String(),
    source: Type.Record(Type.String(), Type.Unknown()),
    config: Type.Optional(ImageConfig),
    boot_snapshots: Type.Optional(
      Type.Array(BootSnapshotRef, {
        description: 'its boot snapshots (docs/snapshots.md "Boot snapshots")',
      }),
    ),
  },
  { $id: 'Image' },
);
export const ImageList = Type.Object({ images: Type.Array(Image) });
export const CreateImage = Type.Object(
  {
    name: ImageName,
    from_dir: Type.String({
      pattern: '^/[^\\u0000]*$',
      maxLength: 4096,
      description: 'a directory on the daemon host',
    }),
    size_mib: Type.Optional(Type.Integer(between(LIMITS.imageSizeMiB))),
    force: Type.Optional(Type.Boolean()),
  },
  strict,
);
export const ImageParams = Type.Object({ name: ImageName }, strict);

const Platform = Type.String({
  pattern: '^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$',
  description: 'os/arch[/variant]; default linux/amd64',
});
/** POST /v1/images/pull: a registry image into an image. */
export const PullImage = Type.Object(
  {
    reference: Type.String({
      minLength: 1,
      maxLength: 1024,
      description: 'REGISTRY/REPOSITORY[:TAG][@DIGEST]',
    }),
    name: Type.Optional(ImageName),
    platform: Type.Optional(Platform),
    size_mib: Type.Optional(Type.Integer(between(LIMITS.imageSizeMiB))),
    force: Type.Optional(
      Type.Boolean({ description: 'rebuild even when the image has this digest already' }),
    ),
    stream: Type.Optional(
      Type.Boolean({ description: 'answer with NDJSON progress events, then the image' }),
    ),
  },
  strict,
);
/** POST /v1/images/import: an OCI layout or `docker save` archive on the daemon host. */
export const ImportImage = Type.Object(
  {
    path: Type.String({
      pattern: '^/[^\\u0000]*$',
      maxLength: 4096,
      description: 'an OCI layout directory or an image tar on the daemon host',
    }),
    ref: Type.Optional(
      Type.String({ maxLength: 256, description: 'which image of a multi-image archive' }),
    ),
    name: Type.Optional(ImageName),
    platform: Type.Optional(Platform),
    size_mib: Type.Optional(Type.Integer(between(LIMITS.imageSizeMiB))),
    force: Type.Optional(Type.Boolean()),
    stream: Type.Optional(Type.Boolean()),
  },
  strict,
);
/**
 * Streaming pull/import (application/x-ndjson): {"type":"progress","message",layer?,current?,
 * total?} lines, then {"type":"done","image":Image} or {"type":"error","error"}.
 */
export const ImageEvent = Type.Union(
  [
    Type.Object({
      type: Type.Literal('progress'),
      message: Type.String(),
      layer: Type.Optional(Type.String()),
      current: Type.Optional(Type.Integer()),
      total: Type.Optional(Type.Integer()),
    }),
    Type.Object({ type: Type.Literal('done'), image: Image }),
    Type.Object({ type: Type.Literal('error'), error: ErrorBody.properties.error }),
  ],
  { $id: 'ImageEvent' },
);
export const PruneResult = Type.Object({
  blobs: Type.Integer({ description: 'cached blobs removed' }),
  bytes: Type.Integer({ description: 'bytes freed' }),
});
/** POST /v1/logins: registry credentials, checked against the registry, then kept. */
export const Login = Type.Object(
  {
    registry: Type.String({ pattern: '^[A-Za-z0-9.:\\[\\]-]{1,255}$', description: 'host[:port]' }),
    username: Type.String({ minLength: 1, maxLength: 1024 }),
    password: Type.String({ minLength: 1, maxLength: 65536 }),
  },
  strict,
);
export const LoginParams = Type.Object(
  { registry: Type.String({ pattern: '^[A-Za-z0-9.:\\[\\]-]{1,255}$' }) },
  strict,
);

// ---- snapshots -------------------------------------------------------------------------

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

/**
 * A snapshot's pool of pre-started VMMs (docs/snapshots.md, "The VMM pool"): QEMUs that are
 * not sandboxes (`forkd ps` counts them apart), so what they take is shown here.
 */
export const PoolState = Type.Object({
  size: Type.Integer({ description: 'pool VMs asked for' }),
  ready: Type.Integer({ description: 'pool VMs waiting now' }),
  prewarm: Type.Boolean(),
  memory_bytes: Type.Union([Type.Integer(), Type.Null()], {
    description: 'host memory the waiting VMs take together (null: not measured on this host)',
  }),
});

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

// ---- branch, chains, lineage -----------------------------------------------------------

export const BranchMode = Type.Union([Type.Literal('copy'), Type.Literal('live')], {
  description:
    "copy: the written memory is copied while the source is stopped; live: the source is stopped only to take a copy-on-write view of its memory, copied after it resumed (`forkd doctor` says whether this host can). Default: the daemon's --branch-mode, by default live where the host can, else copy",
});

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
export const LineageQuery = Type.Object({ tag: Type.Optional(SnapshotTag) }, strict);

export const VerifyResult = Type.Object({
  ok: Type.Boolean(),
  problems: Type.Array(Type.Object({ file: Type.String(), problem: Type.String() })),
});

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

// ---- host ----------------------------------------------------------------------------

export const Health = Type.Object({ status: Type.Literal('ok') });
export const Version = Type.Object({
  version: Type.String(),
  api: Type.Literal('v1'),
  qemu: Type.String(),
  accel: Type.Union([Type.Literal('kvm'), Type.Literal('tcg')]),
});

export type SandboxT = Static<typeof Sandbox>;
export type SandboxTierT = Static<typeof SandboxTier>;
export type PauseSandboxT = Static<typeof PauseSandbox>;
export type PatchSandboxT = Static<typeof PatchSandbox>;
export type IdlePolicyRequestT = Static<typeof IdlePolicyRequest>;
export type IdlePolicyT = Static<typeof IdlePolicy>;
export type LimitsRequestT = Static<typeof LimitsRequest>;
export type CreateSandboxT = Static<typeof CreateSandbox>;
export type ExecRequestT = Static<typeof ExecRequest>;
export type ExecResultT = Static<typeof ExecResult>;
export type ExecEventT = Static<typeof ExecEvent>;
export type FileStatT = Static<typeof FileStat>;
export type ImageT = Static<typeof Image>;
export type BootSnapshotRefT = Static<typeof BootSnapshotRef>;
export type PullImageT = Static<typeof PullImage>;
export type BuildQueryT = Static<typeof BuildQuery>;
export type ImportImageT = Static<typeof ImportImage>;
export type PruneResultT = Static<typeof PruneResult>;
export type LoginT = Static<typeof Login>;
export type ForkResultT = Static<typeof ForkResult>;
export type SnapshotT = Static<typeof Snapshot>;
export type CreateSnapshotT = Static<typeof CreateSnapshot>;
export type GuestUserT = Static<typeof GuestUser>;
export type VerifyResultT = Static<typeof VerifyResult>;
export type PoolStateT = Static<typeof PoolState>;
export type BranchModeT = Static<typeof BranchMode>;
export type BranchRequestT = Static<typeof BranchRequest>;
export type BranchResultT = Static<typeof BranchResult>;
export type LineageT = Static<typeof Lineage>;

/** Every named schema, registered with Fastify so the OpenAPI document references them. */
export const SHARED_SCHEMAS: TSchema[] = [
  ErrorBody,
  Sandbox,
  ExecResult,
  ExecEvent,
  FileStat,
  Image,
  ForkResult,
  Snapshot,
  SnapshotEvent,
  BranchResult,
  Lineage,
  SandboxNetwork,
  ImageEvent,
];
export type NetworkModeT = Static<typeof NetworkMode>;
export type EgressPolicyT = Static<typeof EgressPolicy>;
export type SandboxNetworkT = Static<typeof SandboxNetwork>;
export type PublishedPortT = Static<typeof PublishedPort>;

// ---- terminal sessions (GET /v1/sandboxes/:id/pty, a WebSocket) ---------------------------

/** A terminal session's id: `pty-` and the guest agent's session number. */
export const PtySessionId = Type.String({ pattern: '^pty-[0-9]{1,15}$' });

/** Opening (cols, rows, cmd…) or reattaching (session, since) a terminal session. */
export const PtyQuery = Type.Object(
  {
    cols: Type.Optional(Type.Integer(between(LIMITS.ptySize))),
    rows: Type.Optional(Type.Integer(between(LIMITS.ptySize))),
    cmd: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 65536,
        description: 'run by /bin/sh -c; default: a login shell (bash if the image has it)',
      }),
    ),
    cwd: Type.Optional(GuestPath),
    user: Type.Optional(Type.String({ pattern: USER_PATTERN })),
    term: Type.Optional(
      Type.String({
        pattern: '^[A-Za-z0-9._+-]{1,64}$',
        description: 'TERM (default xterm-256color)',
      }),
    ),
    session: Type.Optional(PtySessionId),
    since: Type.Optional(
      Type.Integer({ minimum: 0, description: 'reattach: replay output from this byte offset' }),
    ),
  },
  strict,
);
export type PtyQueryT = Static<typeof PtyQuery>;

/** One terminal session the guest holds (GET /v1/sandboxes/:id/pty without an upgrade). */
export const PtySession = Type.Object(
  {
    session: PtySessionId,
    pid: Type.Integer({ description: "its command's pid in the guest" }),
    attached: Type.Boolean({ description: 'a client watches it now' }),
    exited: Type.Boolean({
      description: 'its command ended; the exit waits for an attachment to report it',
    }),
    offset: Type.Integer({ minimum: 0, description: 'bytes of output produced so far' }),
    age_ms: Type.Integer({ minimum: 0 }),
  },
  { $id: 'PtySession' },
);
export type PtySessionT = Static<typeof PtySession>;
export const PtySessionList = Type.Object({ sessions: Type.Array(PtySession) });
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
export const UnpackSnapshot = Type.Object(
  {
    file: PackFilePath,
    tag: Type.Optional(SnapshotTag),
    force: Type.Optional(Type.Boolean({ description: 'replace a snapshot of that tag' })),
    stream: Type.Optional(Type.Boolean()),
  },
  strict,
);
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
export type SnapshotOriginT = Static<typeof SnapshotOrigin>;
export type PackSnapshotT = Static<typeof PackSnapshot>;
export type UnpackSnapshotT = Static<typeof UnpackSnapshot>;
export type PushSnapshotT = Static<typeof PushSnapshot>;
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
export type CacheEntryT = Static<typeof CacheEntry>;
export type CacheInfoT = Static<typeof CacheInfo>;
export type CachePruneResultT = Static<typeof CachePruneResult>;
export type PullSnapshotT = Static<typeof PullSnapshot>;
export type PackResultT = Static<typeof PackResult>;
export type UnpackResultT = Static<typeof UnpackResult>;
export type PushResultT = Static<typeof PushResult>;
SHARED_SCHEMAS.push(PackResult, UnpackResult, PushResult, CacheEntry, CacheInfo, CachePruneResult);
// ---- the web UI's feeds: GET /v1/events, /v1/doctor, /v1/bench ---------------------------

/** One change the event stream reports: a sandbox or snapshot was created, changed or removed. */
export const ChangeEvent = Type.Object(
  {
    kind: Type.Union([Type.Literal('sandbox'), Type.Literal('snapshot')]),
    id: Type.String({
      description:
        'the sandbox id or snapshot tag; `*` when several ended sandboxes were forgotten',
    }),
    op: Type.Union([Type.Literal('created'), Type.Literal('updated'), Type.Literal('removed')]),
    state: Type.Union([Type.String(), Type.Null()], {
      description: 'the state after; null once removed',
    }),
    at: Type.String({ description: 'when the daemon wrote it (ISO 8601)' }),
  },
  {
    $id: 'ChangeEvent',
    description: 'the data of one `change` event of GET /v1/events (server-sent events)',
  },
);
export type ChangeEventT = Static<typeof ChangeEvent>;
SHARED_SCHEMAS.push(ChangeEvent);

export const EventsQuery = Type.Object(
  {
    timeout_s: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: LIMITS.timeoutS.max,
        description: 'end the stream after this many seconds (default: never; 0: at once)',
      }),
    ),
  },
  strict,
);
export type EventsQueryT = Static<typeof EventsQuery>;

export const DoctorCheck = Type.Object({
  id: Type.String(),
  status: Type.Union([Type.Literal('pass'), Type.Literal('warn'), Type.Literal('fail')]),
  summary: Type.String(),
  fix: Type.Optional(Type.String({ description: 'what to do about a warn or fail' })),
});
export const DoctorReport = Type.Object({
  ok: Type.Boolean({ description: 'false when any check fails (no sandbox can boot)' }),
  checks: Type.Array(DoctorCheck),
});
export type DoctorReportT = Static<typeof DoctorReport>;

export const BenchResult = Type.Object({
  name: Type.String({ description: 'the file name under bench/results' }),
  modified_at: Type.String(),
  text: Type.String({ description: 'what the benchmark printed' }),
});
export const BenchResults = Type.Object({ results: Type.Array(BenchResult) });
export type BenchResultT = Static<typeof BenchResult>;
