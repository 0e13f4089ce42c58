/**
 * The REST contract, sandboxes: state, idle tiers and policy, network, limits, create, fork, change, list.
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type, { type Static } from 'typebox';
import { between, strict } from './build.js';
import { FORK_MAX, LIMIT_RANGES, LIMITS, NAME_PATTERN } from '../rules.js';
import { Env, ErrorBody, ImageName, LabelKey, Labels, SandboxId } from './common.js';

export const SandboxState = Type.Union(
  [
    Type.Literal('starting'),
    Type.Literal('running'),
    Type.Literal('stopped'),
    Type.Literal('dead'),
  ],
  { description: 'starting → running → stopped (killed by request or timeout) | dead (QEMU died)' },
);

/** How awake a running sandbox is (docs/idle.md); `state` stays `running` while it is paused. */
export const SandboxTier = Type.Union(
  [
    Type.Literal('running'),
    Type.Literal('paused'),
    Type.Literal('hibernated'),
    Type.Literal('halted'),
  ],
  {
    description:
      'running | paused (QEMU stopped: no CPU) | hibernated (captured to disk, no QEMU) | halted (only its disk kept: a wake boots it cold); any request wakes it',
  },
);
export type SandboxTierT = Static<typeof SandboxTier>;

/** Seconds without a request before an idle tier; 0 or null: never. */
const IdleAfter = (what: string, leftOut: string) =>
  Type.Optional(
    Type.Union([Type.Integer(between(LIMITS.idleAfterS)), Type.Null()], {
      description: `${what} after this many seconds without a request; 0 or null: never; left out: ${leftOut}`,
    }),
  );

/** An idle policy asked for: the same two times on a create, a fork and a change. */
export const idlePolicyRequest = (leftOut: string, description: string) =>
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
  "when it is paused unasked (docs/idle.md); a fork does not inherit its snapshot's source's policy",
);
export type IdlePolicyRequestT = Static<typeof IdlePolicyRequest>;

/** A new idle policy for a running sandbox (PATCH; docs/idle.md). */
export const IdlePolicyChange = idlePolicyRequest(
  'its value now',
  'its new idle policy, at once (docs/idle.md): a paused sandbox keeps its tier, the times count from now',
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
  { description: 'when it is paused unasked (docs/idle.md)' },
);
export type IdlePolicyT = Static<typeof IdlePolicy>;

export const NetworkMode = Type.Union([Type.Literal('none'), Type.Literal('nat')], {
  description: "`nat` (default): a NIC with NAT in the sandbox's own namespace; `none`: no NIC",
});
export type NetworkModeT = Static<typeof NetworkMode>;
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
export type EgressPolicyT = Static<typeof EgressPolicy>;
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
export type PublishedPortT = Static<typeof PublishedPort>;
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
export type SandboxNetworkT = Static<typeof SandboxNetwork>;
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
export type SandboxT = Static<typeof Sandbox>;

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
export type LimitsRequestT = Static<typeof LimitsRequest>;

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
          "run the sandbox's QEMU in this network namespace (a path, as a Kubernetes pod's) instead of one of forkd's: the guest's traffic leaves from the namespace's addresses; forkd applies no egress policy there. A fork needs a snapshot made with network nat; a start from an image needs network nat (the default)",
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
export type CreateSandboxT = Static<typeof CreateSandbox>;

/** The answer to a fork of n children: who came up, who did not and why. */
export const ForkResult = Type.Object(
  {
    sandboxes: Type.Array(Sandbox),
    failed: Type.Array(Type.Object({ index: Type.Integer(), error: ErrorBody.properties.error })),
  },
  { $id: 'ForkResult' },
);
export type ForkResultT = Static<typeof ForkResult>;

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
export type PatchSandboxT = Static<typeof PatchSandbox>;

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

/** DELETE /v1/sandboxes/:id: whether the answer waits for the teardown. */
export const KillSandboxQuery = Type.Object(
  {
    wait: Type.Optional(
      Type.Boolean({
        description:
          'false: answer 202 once the kill is under way (the VM, network, cgroup and files go in the background; the row turns stopped when done); default true: answer 204 when all is gone',
      }),
    ),
  },
  strict,
);

/** POST /v1/sandboxes/:id/pause: pause a sandbox into a tier (default paused). */
export const PauseSandbox = Type.Object(
  {
    tier: Type.Optional(
      Type.Union([Type.Literal('paused'), Type.Literal('hibernated'), Type.Literal('halted')], {
        description:
          'paused (default): QEMU stopped; hibernated: captured to disk, QEMU ended; halted: guest synced, QEMU ended, only the disk kept (the wake is a cold boot)',
      }),
    ),
  },
  strict,
);
export type PauseSandboxT = Static<typeof PauseSandbox>;
