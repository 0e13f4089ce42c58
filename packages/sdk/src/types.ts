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
  /** Why it is stopped or dead. */
  reason?: string;
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
 * A snapshot's pool of pre-started VMMs (wire object `PoolState`): the size asked for and
 * how many wait ready for a fork.
 *
 * @example
 * const { size, ready }: PoolInfo = await snapshot.setPool(4);
 */
export interface PoolInfo {
  size: number;
  ready: number;
  /** Pool VMs are restored, run once and paused ahead of the fork. */
  prewarm: boolean;
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
