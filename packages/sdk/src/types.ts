/**
 * The SDK's data types: plain, hand-written mirrors of the REST contract's objects
 * (src/contract/schemas.ts) in camelCase. wire.ts maps each field to its wire name, and a test
 * checks those names against the schemas, so the two cannot drift.
 */

/**
 * A sandbox's lifecycle state: `starting` → `running` → `stopped` (killed by request or
 * timeout), or `dead` (its VM died).
 *
 * @example
 * const live: SandboxState[] = ['starting', 'running'];
 */
export type SandboxState = 'starting' | 'running' | 'stopped' | 'dead';

/**
 * How awake a running sandbox is (docs/idle.md): `paused` (its VM stopped: no CPU),
 * `hibernated` (on disk: no memory) or `halted` (only its disk kept: the wake is a cold
 * boot); its `state` stays `running`, and any request wakes it.
 *
 * @example
 * if (sbx.info.tier !== 'running') await sbx.resume();
 */
export type SandboxTier = 'running' | 'paused' | 'hibernated' | 'halted';

/**
 * When a sandbox pauses itself after its last request (docs/idle.md), asked for on create or
 * fork, or changed later with `sbx.setIdle`. On a create or fork a field left out takes the
 * daemon's default (`--pause-idle-after`, `--hibernate-idle-after`); on `setIdle` it keeps
 * its value. 0 or null means never. The daemon counts whole seconds (rounded up);
 * hibernation must come after the pause. A fork does not inherit its snapshot's source's.
 *
 * @example
 * const sbx = await Sandbox.create({ idle: { pauseAfterMs: 60_000, hibernateAfterMs: 900_000 } });
 */
export interface IdleOptions {
  pauseAfterMs?: number | null;
  hibernateAfterMs?: number | null;
}

/**
 * The idle policy a sandbox has: its own (`source: 'sandbox'`) or the daemon's defaults.
 * null: never.
 *
 * @example
 * const { idle } = await sbx.getInfo();
 * if (idle?.pauseAfterMs === null) console.log('it is never paused for being idle');
 */
export interface SandboxIdle {
  pauseAfterMs: number | null;
  hibernateAfterMs: number | null;
  source: 'sandbox' | 'daemon';
}

/**
 * What the daemon knows about a sandbox (wire object `Sandbox`).
 *
 * @example
 * const [first] = await Sandbox.list();
 * console.log(first?.id, first?.state, first?.memoryMib);
 */
export interface SandboxInfo {
  /** `sbx-` and 12 hex digits. */
  id: string;
  state: SandboxState;
  /** The image it booted from, if it booted from one. */
  image: string | null;
  /** The snapshot it was forked from, if it was forked. */
  snapshot: string | null;
  /** The sandbox it descends from, if any. */
  parent: string | null;
  memoryMib: number;
  cpus: number;
  labels: Record<string, string>;
  /** ISO 8601. */
  createdAt: string;
  /** ISO 8601; null when it has no timeout. */
  expiresAt: string | null;
  /** Host pid of its VMM. */
  pid: number | null;
  /** Its network while it runs: mode and egress policy (see {@link SandboxNetwork}). */
  network?: { mode: NetworkMode; egress: Egress };
  /** Why it is stopped or dead. */
  reason?: string;
  /** Resource limits of its QEMU on the host (absent from a daemon older than limits). */
  limits?: SandboxLimits;
  /** What it uses now: only on a running sandbox, only from `Sandbox.getInfo`/`connect`. */
  usage?: SandboxUsage;
  /** How awake it is (absent from a daemon older than idle tiers). */
  tier?: SandboxTier;
  /** When it pauses itself, while it runs (absent from a daemon older than idle policies). */
  idle?: SandboxIdle;
  /** How its QEMU is confined: only on a running sandbox, from `getInfo`/`connect`. */
  confinement?: SandboxConfinement;
  /**
   * While it runs, what it asks that the host does not enforce (a daemon started with
   * `--accept-unenforced`): `network`, `names`, `limits`, `confinement`; empty: all is.
   */
  unenforced?: ('network' | 'names' | 'limits' | 'confinement')[];
}

/**
 * How a running sandbox's QEMU is confined, as the host kernel reports it
 * (docs/security.md).
 *
 * @example
 * const { confinement } = (await Sandbox.connect(id)).info;
 * if (!confinement?.seccomp) console.warn('QEMU runs without a seccomp filter');
 */
export interface SandboxConfinement {
  /** The effective uid of its QEMU (a uid of its own when the daemon is root). */
  uid: number;
  /** A seccomp filter is in force. */
  seccomp: boolean;
  /** QEMU's `-sandbox` option; null: none. */
  sandbox: string | null;
  /** The filter allows process creation (what a live branch needs). */
  spawn: boolean;
  /** Effective capabilities in hex; all zeros: none. */
  capabilities: string;
  /**
   * The namespaces its QEMU has of its own beside the network one: `mount` (its jail, a
   * root holding only its files) and `ipc`; empty when it is not jailed.
   */
  namespaces: ('mount' | 'ipc')[];
}

/**
 * A sandbox's resource limits, caps on its QEMU process (docs/limits.md). `null`: no limit
 * of that kind. `cgroup` is null when the host cannot enforce limits (`forkd doctor`).
 *
 * @example
 * const { limits } = (await Sandbox.connect(id)).info;
 * console.log(limits?.memoryBytes, limits?.cpu, limits?.pids, limits?.cgroup);
 */
export interface SandboxLimits {
  /** Guest RAM plus QEMU's own memory, in bytes. */
  memoryBytes: number | null;
  /** CPU quota in cores (0.5 = half a core). */
  cpu: number | null;
  /** QEMU's threads and processes (not the guest's processes). */
  pids: number | null;
  cgroup: 'v1' | 'v2' | null;
}

/**
 * What a running sandbox's QEMU uses, read from its cgroup.
 *
 * @example
 * const { usage } = (await Sandbox.connect(id)).info;
 * if (usage && usage.oomKills > 0) console.warn('hit its memory limit');
 */
export interface SandboxUsage {
  cpuSeconds: number;
  memoryBytes: number;
  /** CPU time its quota held back. */
  throttledSeconds: number;
  /** Kills by the host's OOM killer at its memory limit. */
  oomKills: number;
}

/**
 * Resource limits to ask for on create or fork (a fork inherits its snapshot's otherwise).
 *
 * @example
 * await Sandbox.create({ image: 'busybox', limits: { memory: '512M', cpu: 0.5, pids: 128 } });
 */
export interface LimitsOptions {
  /** A size with a unit (`768M`, `1G`; powers of 1024) or bytes; at least the guest's RAM. */
  memory?: string | number;
  /** A quota in cores, e.g. 0.5; at most the host's cores. */
  cpu?: number;
  pids?: number;
}

/**
 * How a command ended, and all it printed (wire object `ExecResult`, decoded).
 *
 * @example
 * const r: CommandResult = await sandbox.commands.run('uname -a');
 * if (r.exitCode !== 0) console.error(r.stderr);
 */
export interface CommandResult {
  /** Null when a signal ended it. */
  exitCode: number | null;
  /** The signal that ended it, like `SIGKILL`. */
  signal: string | null;
  /** True when `timeoutMs` ran out and the command was killed. */
  timedOut: boolean;
  durationMs: number;
  stdout: string;
  stderr: string;
}

/**
 * A file or directory inside a sandbox (wire object `FileStat`).
 *
 * @example
 * const info: EntryInfo = await sandbox.files.stat('/etc/hostname');
 * console.log(info.kind, info.size);
 */
export interface EntryInfo {
  /** The last path component. */
  name: string;
  kind: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  /** Permission bits, like 0o644. */
  mode: number;
  /** Last modification, ms since the epoch. */
  mtimeMs: number;
  /** Owning user and group (names, else ids); only where the daemon was asked for them. */
  owner?: string;
  group?: string;
  /** A symlink's target, as written (not resolved). */
  target?: string;
  /** A file's or directory's `user.*` extended attributes, when it has any. */
  xattrs?: Record<string, string>;
}

/**
 * An image on the daemon's host (wire object `Image`).
 *
 * @example
 * const images: ImageInfo[] = await new Forkd().images.list();
 */
export interface ImageInfo {
  name: string;
  format: string;
  /** Filesystem size. */
  sizeBytes: number;
  /** Bytes it takes on disk (images are sparse). */
  diskBytes: number;
  /** ISO 8601. */
  createdAt: string;
  /** How it was built, as the daemon describes it (e.g. `{ kind: 'dir', dir: '/src' }`). */
  source: Record<string, unknown>;
  /** For images pulled or imported from OCI/Docker images: their sandbox defaults. */
  config?: ImageConfigInfo;
  /** Its boot snapshots: what starts of it fork from instead of booting (docs/snapshots.md). */
  bootSnapshots?: BootSnapshotInfo[];
  /** What a build, pull or import did not do without failing (a boot snapshot not captured). */
  warnings?: string[];
  /** A cache entry (a container image's root, made by the containerd shim): removed once unused. */
  cache?: boolean;
}

/**
 * A boot snapshot of an image (an Image's `bootSnapshots`).
 *
 * @example
 * const ready = (await forkd.images.get('busybox')).bootSnapshots?.filter((b) => b.current);
 */
export interface BootSnapshotInfo {
  tag: string;
  memoryMib: number;
  cpus: number;
  network: 'none' | 'nat';
  /** Bytes its files take on disk. */
  physicalBytes: number;
  /** Whether it matches the image as it is now (an older one is never used). */
  current: boolean;
}

/**
 * An OCI image config as a sandbox's defaults: what `forkd run --image NAME` runs with no
 * command (`entrypoint` + `cmd`, in `workingDir`, as `user`, with `env`).
 *
 * @example
 * const argv = [...(cfg.entrypoint ?? []), ...(cfg.cmd ?? [])];
 */
export interface ImageConfigInfo {
  /** `KEY=VALUE` entries. */
  env: string[];
  workingDir?: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
}

/**
 * One progress event of a pull or import: a step, or a layer's bytes so far.
 *
 * @example
 * const onProgress = (e: ImageProgress) => console.error(e.message, e.current ?? '');
 */
export interface ImageProgress {
  message: string;
  /** The layer's digest, on byte-count events. */
  layer?: string;
  current?: number;
  total?: number;
}

/**
 * Where a snapshot is in its life: `writing` while it is being made, `ready` once
 * published, `failed` when making it failed.
 *
 * @example
 * const settled: SnapshotState[] = ['ready', 'failed'];
 */
export type SnapshotState = 'ready' | 'writing' | 'failed';

/**
 * One file of a snapshot (wire object `SnapshotFile`): memory, device state, disk layers.
 *
 * @example
 * for (const f of info.files) console.log(f.name, f.size, f.allocated);
 */
export interface SnapshotFileInfo {
  name: string;
  /** Logical bytes. */
  size: number;
  /** Bytes allocated on disk (snapshot files are sparse). */
  allocated: number;
  sha256: string;
}

/**
 * A snapshot's pool of pre-started VMMs (wire object `PoolState`): the size asked for, how
 * many wait ready for a fork, and the host memory they take. They are QEMUs but not
 * sandboxes: `Sandbox.list()` does not return them.
 *
 * @example
 * const { size, ready, memoryBytes }: PoolInfo = await snapshot.setPool(4);
 */
export interface PoolInfo {
  size: number;
  ready: number;
  /** Pool VMs are restored, run once and paused ahead of the fork. */
  prewarm: boolean;
  /** Host memory of the waiting VMs together; null when not measured (or an older daemon). */
  memoryBytes: number | null;
  /**
   * VMs of `size` the host's pool budget holds back: snapshots forked more recently took
   * the room. Forks take the cold path meanwhile; a fork of this snapshot wins room back.
   */
  held: number;
  /** The host-wide pool budget and its use (absent from an older daemon). */
  budget?: PoolBudgetInfo;
}

/**
 * The host-wide pool budget (wire object `PoolBudgetState`): all snapshots' pool VMs
 * together stay within `vms` and `memoryBytes`, the least recently forked snapshots' pools
 * giving way first.
 *
 * @example
 * const { budget } = (await Snapshot.get('py')).info.pool;
 * console.log(`${budget?.usedVms} of ${budget?.vms} pool VMs`);
 */
export interface PoolBudgetInfo {
  vms: number;
  memoryBytes: number;
  /** Pool VMs waiting or starting now, all snapshots. */
  usedVms: number;
  /** Host memory the waiting ones took when they became ready (where measured). */
  usedMemoryBytes: number;
}

/**
 * What the daemon knows about a snapshot (wire object `Snapshot`).
 *
 * @example
 * const info: SnapshotInfo = (await Snapshot.get('py')).info;
 * if (!info.bootable) console.error(info.reason);
 */
export interface SnapshotInfo {
  tag: string;
  state: SnapshotState;
  /** False when a file is missing or changed size: forks are refused. */
  bootable: boolean;
  /** Why it is not bootable, or why making it failed. */
  reason?: string;
  /** The image its parent booted from. */
  image: string | null;
  /** The snapshot it is a diff over (chains), if any. */
  parent: string | null;
  /** The sandbox it was branched from, if it was. */
  sourceSandbox: string | null;
  memoryMib: number;
  cpus: number;
  labels: Record<string, string>;
  /** ISO 8601. */
  createdAt: string;
  /** The guest kernel's version. */
  kernel: string;
  /** The QEMU version that made it. */
  qemu: string;
  files: SnapshotFileInfo[];
  /** Sum of the files' logical sizes. */
  logicalBytes: number;
  /** Sum of the bytes its files take on disk. */
  physicalBytes: number;
  /** Running sandboxes forked from it. */
  childrenAlive: number;
  pool: PoolInfo;
  /** How many parent snapshots its disk is layered over (0: standalone). */
  depth: number;
  /** Its parent, grandparent, …: what it needs to stay bootable. */
  ancestors: string[];
  /** Snapshots whose chain includes it: removing it needs `cascade`. */
  dependents: string[];
  /** How its memory is stored (absent from daemons older than diff memory, and while unpublished). */
  memory?: SnapshotMemoryInfo;
  /** Where it came from when it was unpacked or pulled (absent: made on this host). */
  origin?: SnapshotOrigin;
  /**
   * Set on a boot snapshot: what it is valid for (image identity, kernel, QEMU, accelerator,
   * RAM, vCPUs, NIC), as the daemon sends it.
   */
  boot?: Record<string, unknown>;
  /** The user its forks' commands and files default to (absent: root). */
  user?: string;
  /** Where its forks' commands start by default (absent: the user's home). */
  workdir?: string;
}

/** Where an unpacked or pulled snapshot came from. */
export interface SnapshotOrigin {
  kind: 'pack' | 'registry' | 'url';
  /** The pack file, the reference pulled or the URL. */
  from: string;
  /** The pushed manifest's digest, or the pack file's sha256. */
  digest?: string;
  at: string;
}

/**
 * How a snapshot's memory is stored: `full`, or a `diff` over its parent's memory (a branch:
 * only the pages that changed), materialized into a full file for forks and cached.
 *
 * @example
 * const { memory } = (await Snapshot.get('step-3')).info;
 * console.log(memory?.kind, memory?.storedBytes, memory?.materializedBytes);
 */
export interface SnapshotMemoryInfo {
  kind: 'full' | 'diff';
  /** The snapshot whose memory a diff is over. */
  parent: string | null;
  /** Guest RAM size. */
  logicalBytes: number;
  /** Bytes its stored memory file takes on disk. */
  storedBytes: number;
  /** Bytes of the full file built from a diff for forks (cached, evictable; 0 when none). */
  materializedBytes: number;
  /** Diffs read through to a full memory (0: full). */
  depth: number;
}

/**
 * What a lineage node is.
 *
 * @example
 * const kinds: LineageKind[] = ['image', 'snapshot', 'sandbox'];
 */
export type LineageKind = 'image' | 'snapshot' | 'sandbox';

/**
 * One image, snapshot or live sandbox of the lineage, with the edge to what it came from
 * (wire object `LineageNode`): a snapshot's parent snapshot or image, a sandbox's snapshot
 * or image; null for an image.
 *
 * @example
 * for (const n of await new Forkd().lineage()) console.log(n.kind, n.id, n.parent?.id);
 */
export interface LineageNode {
  kind: LineageKind;
  /** An image name, a snapshot tag or a sandbox id. */
  id: string;
  parent: { kind: LineageKind; id: string } | null;
  /** The snapshot's or sandbox's state; `ready` for an image. */
  state: string;
  /** ISO 8601. */
  createdAt: string;
}

/**
 * The outcome of re-checking a snapshot's files (wire object `VerifyResult`).
 *
 * @example
 * const { ok, problems }: VerifyReport = await snapshot.verify();
 * for (const p of problems) console.error(`${p.file}: ${p.problem}`);
 */
export interface VerifyReport {
  ok: boolean;
  problems: { file: string; problem: string }[];
}

/**
 * The daemon's version and host facts (wire object `Version`).
 *
 * @example
 * const v: VersionInfo = await new Forkd().version();
 * console.log(v.version, v.accel);
 */
export interface VersionInfo {
  version: string;
  api: 'v1';
  qemu: string;
  accel: 'kvm' | 'tcg';
}

/**
 * A sandbox's network mode: `nat` (a NIC, NAT in its own namespace) or `none` (no NIC).
 *
 * @example
 * const offline: NetworkMode = 'none';
 */
export type NetworkMode = 'none' | 'nat';

/**
 * An egress policy to set: `'none'` (nothing out, DNS refused) or lists of CIDRs, IPv4
 * addresses, hostnames or `*.domain`, each optionally with `:port`. Fields left out are
 * inherited (from the snapshot on a fork, from the current policy on an update).
 *
 * @example
 * const policy: EgressPolicy = { allowInternet: false, allowOut: ['pypi.org', '*.pythonhosted.org'] };
 */
export type EgressPolicy =
  'none' | { allowInternet?: boolean; allowOut?: string[]; denyOut?: string[] };

/**
 * The egress policy a sandbox has now.
 *
 * @example
 * if ((await sbx.network()).egress.none) console.log('offline');
 */
export interface Egress {
  none: boolean;
  allowInternet: boolean;
  allowOut: string[];
  denyOut: string[];
}

/**
 * A guest port published on the host.
 *
 * @example
 * const { host, hostPort } = await sbx.publishPort(8080);
 */
export interface PublishedPort {
  /** The guest port. */
  port: number;
  hostPort: number;
  /** The host address it listens on (loopback). */
  host: string;
}

/**
 * A sandbox's network (wire object `SandboxNetwork`).
 *
 * @example
 * const { mode, denied, ports } = await sbx.network();
 */
export interface SandboxNetwork {
  mode: NetworkMode;
  /** `netns`: its own namespace, policy enforced; `user`: rootless user networking. */
  isolation?: 'netns' | 'user';
  egress: Egress;
  /** The guest's IPv4 address (the same in every fork). */
  address?: string;
  /** Connections and DNS queries refused so far. */
  denied: number;
  ports: PublishedPort[];
}
