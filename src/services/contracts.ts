/**
 * What the route layer may ask of the services, as interfaces: the daemon wires the real
 * services in, API tests wire fakes. Routes parse and call these; services decide.
 * Field names follow the REST contract (src/contract/schemas.ts) so routes pass values through.
 * Services return domain results and throw catalog errors; only routes make wire bodies.
 */
import type { AuditEntry } from '../store/audit.js';
import type { Readable } from 'node:stream';
import type {
  BranchRequestT,
  BranchResultT,
  BenchResultT,
  BuildQueryT,
  ChangeEventT,
  DoctorReportT,
  CreateSandboxT,
  EgressPolicyT,
  PublishedPortT,
  SandboxNetworkT,
  NetworkModeT,
  LineageT,
  PtyQueryT,
  PtySessionT,
  ExecRequestT,
  ExecResultT,
  CreateSnapshotT,
  FileStatT,
  GuestUserT,
  ImageT,
  IdlePolicyRequestT,
  LimitsRequestT,
  PatchSandboxT,
  ImportImageT,
  CaptureBootSnapshotT,
  LoginT,
  PoolBudgetStateT,
  PoolStateT,
  PruneResultT,
  PullImageT,
  SandboxT,
  SnapshotT,
  VerifyResultT,
} from '../contract/schemas.js';
import type {
  PackResultT,
  PullSnapshotT,
  CacheInfoT,
  CachePruneResultT,
  PushResultT,
  UnpackResultT,
} from '../contract/schemas.js';
import type { SnapshotConfig } from './snapshots/files.js';
import type {
  ContextT,
  CreateContextT,
  EvalEventT,
  EvalForkRequestT,
  EvalForkResultT,
  EvalRequestT,
  ExecutionT,
} from '../contract/contexts.js';

/** Who asked: `unix` for the local socket, else the token's id. For the audit log. */
export interface Caller {
  principal: string;
}

/** One streaming exec, for POST /exec with stream:true. */
export interface ExecStream {
  execId: string;
  pid: Promise<number>;
  /** Events in order: stdout/stderr chunks; ends after the exit (or an error). */
  events: AsyncIterable<
    | { type: 'stdout' | 'stderr'; data: Buffer }
    | {
        type: 'exit';
        exit_code: number | null;
        signal: string | null;
        timed_out: boolean;
        duration_ms: number;
      }
  >;
}

/** How a terminal session's attachment ended (the `exit` frame, or replaced by another). */
export type PtyEnd =
  | {
      type: 'exit';
      exit_code: number | null;
      signal: string | null;
      duration_ms: number;
      /** Bytes the session produced in all. */
      offset: number;
    }
  | { type: 'detached' };

/**
 * One attachment to a terminal session (GET /v1/sandboxes/:id/pty). The session outlives
 * it: `detach` (the client went) leaves it running, and a new attachment with `since`
 * replays the output the guest still holds.
 */
export interface PtyAttachment {
  session: string;
  pid: number;
  /** The byte offset of the first output delivered to `onData`. */
  offset: number;
  input(data: Buffer): Promise<void>;
  resize(cols: number, rows: number): Promise<void>;
  /** To the terminal's foreground job (as Ctrl-C would send SIGINT). */
  signal(name: string): Promise<void>;
  /** Hang the terminal up: the shell is killed, `ended` reports its exit. */
  kill(): Promise<void>;
  /** Stop watching; the session keeps running for a later reattach. */
  detach(): Promise<void>;
  /** Rejects when the guest channel was lost. */
  ended: Promise<PtyEnd>;
}

export interface SandboxService {
  create(req: CreateSandboxT, caller: Caller): Promise<SandboxT>;
  list(filter: {
    state?: SandboxT['state'];
    label?: { key: string; value: string };
  }): Promise<SandboxT[]>;
  get(id: string): Promise<SandboxT>;
  /** Sets expires_at = now + timeoutS (while a pause holds its timeout: what its wake gives back). */
  extend(id: string, timeoutS: number): Promise<SandboxT>;
  /** New limits for a running sandbox (PATCH); fields left out keep their value. */
  setLimits(id: string, req: LimitsRequestT): Promise<SandboxT>;
  /**
   * PATCH: limits, idle policy and timeout together; a refused request changes nothing.
   * An idle time left out keeps its value; a paused sandbox keeps its tier (docs/idle.md).
   */
  update(id: string, patch: PatchSandboxT): Promise<SandboxT>;
  /**
   * End a sandbox: VM, network, cgroup, files; its row stays, `stopped`. With `wait: false`
   * it returns once the ending started (a caller that only needed the VM gone: `forkd run`).
   */
  kill(id: string, opts?: { wait?: boolean }): Promise<void>;
  exec(id: string, req: ExecRequestT): Promise<ExecResultT>;
  execStream(id: string, req: ExecRequestT): Promise<ExecStream>;
  writeStdin(id: string, execId: string, data: Buffer, eof: boolean): Promise<void>;
  killExec(id: string, execId: string, signal: string): Promise<void>;
  readFile(id: string, path: string): Promise<Readable>;
  /** `user`: the file (and the directories `parents` creates) become that guest user's. */
  writeFile(
    id: string,
    path: string,
    body: Readable,
    /** `xattrs`: `user.*` extended attributes the written file gets (E2B's file metadata). */
    opts: { mode?: number; parents?: boolean; user?: string; xattrs?: Record<string, string> },
  ): Promise<number>;
  /** `owners`: with the owning user and group. */
  statFile(id: string, path: string, opts?: { owners?: boolean }): Promise<FileStatT>;
  listFiles(id: string, path: string, opts?: { owners?: boolean }): Promise<FileStatT[]>;
  makeDir(
    id: string,
    path: string,
    opts: { parents?: boolean; mode?: number; user?: string },
  ): Promise<void>;
  removeFile(id: string, path: string, opts: { recursive?: boolean }): Promise<void>;
  /** Who a call naming `user` (default: the sandbox's default user, else root) acts as. */
  guestUser(id: string, user?: string): Promise<GuestUserT>;
  consoleLog(id: string): Promise<string>;
  /** Open a terminal session (cols, rows, cmd…) or reattach one (session, since). */
  pty(
    id: string,
    req: PtyQueryT,
    onData: (chunk: Buffer, offset: number) => void,
  ): Promise<PtyAttachment>;
  /** The terminal sessions its guest holds (GET /pty without an upgrade). */
  ptySessions(id: string): Promise<PtySessionT[]>;
  /**
   * Pause a running sandbox (docs/idle.md): `paused` stops its QEMU (no CPU), `hibernated`
   * also captures it to disk and ends QEMU. Pausing a paused sandbox answers it as it is.
   * `holdTimeout` (E2B's pause) holds its timeout until its wake, which gives back what was
   * left (`expires_at` null meanwhile); otherwise its timeout runs while it is paused.
   */
  pause(id: string, opts?: PauseOptions): Promise<SandboxT>;
  /** Wake a paused sandbox (its guest clock is pushed forward); a running one is a no-op. */
  resume(id: string): Promise<SandboxT>;
}

/** How a sandbox is paused (`SandboxService.pause`). */
export interface PauseOptions {
  tier?: 'paused' | 'hibernated' | 'halted';
  /** Its timeout does not run until its wake (docs/idle.md "The timeout of a paused sandbox"). */
  holdTimeout?: boolean;
}

/** A fork request: n children of one snapshot (POST /v1/sandboxes with snapshot). */
export interface ForkRequest {
  snapshot: string;
  n: number;
  labels?: Record<string, string>;
  env?: Record<string, string>;
  timeout_s?: number;
  all_or_nothing?: boolean;
  /** Must match the snapshot's (its NIC is part of the device state). */
  network?: NetworkModeT;
  /** Merged over the snapshot's policy. */
  egress?: EgressPolicyT;
  /** Overrides the limits the children inherit from their snapshot. */
  limits?: LimitsRequestT;
  /** The children's idle policy (not inherited; left out: the daemon's defaults). */
  idle?: IdlePolicyRequestT;
  /** Run the children's QEMU in this network namespace (a pod's) instead of forkd's own. */
  netns?: string;
  /** With netns: guest TCP ports forwarded from every address of the namespace. */
  forward_ports?: number[];
}

/**
 * The answer to a fork of n children: who came up, and each failed child's error itself
 * (the route turns it into the catalog body, scrubbed like any other error).
 */
export interface ForkOutcome {
  sandboxes: SandboxT[];
  failed: { index: number; error: unknown }[];
}

/** A branch's answer, its children (with `fork`) as a ForkOutcome. */
export type BranchOutcome = Omit<BranchResultT, 'children'> & { children?: ForkOutcome };

export interface SnapshotService {
  /**
   * Boot, warm, capture, publish; `onProgress` gets human-readable steps; aborting `signal`
   * (the client went away) stops it and removes everything it made.
   */
  create(
    req: CreateSnapshotT,
    caller: Caller,
    onProgress?: (message: string) => void,
    signal?: AbortSignal,
  ): Promise<SnapshotT>;
  list(): Promise<SnapshotT[]>;
  get(tag: string): Promise<SnapshotT>;
  verify(tag: string): Promise<VerifyResultT>;
  /**
   * Refuses (snapshot_in_use) while sandboxes run from it unless `force` kills them, and
   * while snapshots are built on it unless `cascade` removes that whole subtree.
   */
  remove(tag: string, opts: { force?: boolean; cascade?: boolean }): Promise<void>;
  /** Flatten a chained snapshot into a standalone one under a new tag. */
  compact(tag: string, to: string, caller: Caller): Promise<SnapshotT>;
  /** Every image, snapshot and live sandbox with its parent edge (only `tag`'s subtree if given). */
  lineage(tag?: string): Promise<LineageT>;
  setPool(tag: string, size: number, opts?: { prewarm?: boolean }): Promise<PoolStateT>;
  /** The host-wide pool budget and what all pools take of it (pool-budget.ts). */
  poolBudget(): PoolBudgetStateT;
  fork(req: ForkRequest, caller: Caller): Promise<ForkOutcome>;
}

export interface BranchService {
  /**
   * Capture a running sandbox into a new snapshot; the sandbox keeps running. With
   * `no_wait` the answer comes once the source resumed (the snapshot is `writing` then).
   */
  branch(id: string, req: BranchRequestT, caller: Caller): Promise<BranchOutcome>;
}

export interface ImageService {
  list(): Promise<ImageT[]>;
  create(req: {
    name: string;
    from_dir: string;
    size_mib?: number;
    force?: boolean;
    boot_snapshot?: boolean;
    /** A cache entry: removed once unused for the daemon's image cache time. */
    cache?: boolean;
  }): Promise<ImageT>;
  remove(name: string): Promise<void>;
  /** One image with its config (`image inspect`). */
  get(name: string): Promise<ImageT>;
  /** Pull from a registry; progress as events; aborting `signal` stops it, leaving nothing. */
  pull(
    req: Omit<PullImageT, 'stream'>,
    onProgress?: (e: ImageProgress) => void,
    signal?: AbortSignal,
  ): Promise<ImageT>;
  /** Import an OCI layout or `docker save` archive on the daemon host. */
  import(
    req: Omit<ImportImageT, 'stream'>,
    onProgress?: (e: ImageProgress) => void,
  ): Promise<ImageT>;
  /** Capture the image's boot snapshot of a size now (`forkd image build` with a daemon). */
  captureBootSnapshot(
    name: string,
    req: Omit<CaptureBootSnapshotT, 'stream'>,
    onProgress?: (e: ImageProgress) => void,
  ): Promise<ImageT>;
  /** Remove cache images no sandbox or snapshot uses, then cached blobs no image uses. */
  prune(): Promise<PruneResultT>;
  /** Check and keep registry credentials; `logout` forgets them. */
  login(req: LoginT): Promise<void>;
  logout(registry: string): Promise<void>;
}

/** A pull or import's progress: a step, or a layer's bytes so far. */
export interface ImageProgress {
  message: string;
  layer?: string;
  current?: number;
  total?: number;
}

export type { AuditEntry };

export interface AuditLog {
  record(entry: AuditEntry): void;
}

/** Host facts for /version and /metrics. */
export interface HostInfo {
  qemuVersion(): Promise<string>;
  accel(): Promise<'kvm' | 'tcg'>;
  /** Gauges for /metrics: sandboxes by state. */
  sandboxCounts(): Record<string, number>;
  /** Gauges for /metrics: each running sandbox's limits and use (its cgroup's numbers). */
  sandboxUsage(): Promise<SandboxUsageT[]>;
  /** `forkd doctor` on the daemon's host (GET /v1/doctor). */
  doctor?(): Promise<DoctorReportT>;
  /** The benchmark outputs saved beside the daemon (bench/results; GET /v1/bench). */
  benchResults?(): Promise<BenchResultT[]>;
}

/** One running sandbox's limits and use, as /metrics reports them. */
export interface SandboxUsageT {
  id: string;
  limits: NonNullable<SandboxT['limits']> | null;
  cpu_seconds: number;
  memory_bytes: number;
  throttled_seconds: number;
  oom_kills: number;
}

/** Code contexts (warm interpreters) of running sandboxes, and eval in them. */
export interface ContextService {
  create(id: string, req: CreateContextT): Promise<ContextT>;
  list(id: string): Promise<ContextT[]>;
  /** Fresh state: the interpreter is replaced, with the same cwd and env. */
  restart(id: string, name: string): Promise<ContextT>;
  remove(id: string, name: string): Promise<void>;
  /** Ctrl-C: the running code gets KeyboardInterrupt; the context lives on. */
  interrupt(id: string, name: string): Promise<void>;
  eval(id: string, req: EvalRequestT): Promise<ExecutionT>;
  /** Resolves once the code started (a missing context is an error of this call). */
  evalStream(id: string, req: EvalRequestT): Promise<AsyncIterable<EvalEventT>>;
  /** Branch the sandbox with one child per variant, run each, gather the N results. */
  evalFork(id: string, req: EvalForkRequestT, caller: Caller): Promise<EvalForkResultT>;
}

export interface Services {
  contexts: ContextService;
  sandboxes: SandboxService;
  snapshots: SnapshotService;
  branch: BranchService;
  images: ImageService;
  audit: AuditLog;
  host: HostInfo;
  /** Absent when the daemon runs without networking (every sandbox is `none`). */
  network?: NetworkService;
  /** Builds from a Dockerfile (absent: not offered). */
  builds?: BuildService;
  /** Portable snapshots: pack, unpack, push, pull (absent: not offered). */
  packs?: PackService;
  /** Sandbox and snapshot changes as they happen (GET /v1/events); absent: the stream stays quiet. */
  events?: EventService;
}

/** Sandbox and snapshot changes as the services write them (the web UI's live tree). */
export interface EventService {
  /** Calls `fn` on every change until the returned function is called. */
  subscribe(fn: (event: ChangeEventT) => void): () => void;
}

/** A running sandbox's network: its policy, its published ports, the daemon's way in. */
export interface NetworkService {
  get(id: string): Promise<SandboxNetworkT>;
  /** Change the egress policy at run time (merged over the current one). */
  patch(id: string, egress: EgressPolicyT): Promise<SandboxNetworkT>;
  publish(id: string, port: number, hostPort?: number): Promise<PublishedPortT>;
  unpublish(id: string, port: number): Promise<void>;
  /** Denials so far per running sandbox, for /metrics. */
  deniedCounts(): Promise<Record<string, number>>;
  /** Refusals so far per running sandbox, by reason (name_address, quic, ech…), for /metrics. */
  refusedCounts(): Promise<Record<string, Record<string, number>>>;
  /** Where the daemon connects to reach a guest port (the HTTP route through the daemon). */
  reach(id: string, port: number): Promise<{ host: string; port: number }>;
}

/** What a build's result records (the manifest's `config`) and is labelled with. */
export type BuildConfig = SnapshotConfig & { labels: Record<string, string> };

/** One event of a build as it runs (docs/build.md "Events"). */
export type BuildEvent =
  | { type: 'step'; step: number; total: number; line: number; instruction: string }
  | { type: 'output'; step: number; stream: 'stdout' | 'stderr'; data: string }
  | {
      type: 'step_done';
      step: number;
      /** `cached`: its snapshot was reused; `config`: it only changed the config. */
      status: 'cached' | 'ran' | 'config';
      duration_ms: number;
      snapshot: string | null;
    }
  | { type: 'message'; message: string };

export interface BuildStepResult {
  step: number;
  line: number;
  instruction: string;
  status: 'cached' | 'ran' | 'config';
  duration_ms: number;
  snapshot: string | null;
  /** Bytes its snapshot stores on disk (0 for a config step). */
  disk_bytes: number;
}

export interface BuildResult {
  /** The published tag, or null when the build named none. */
  tag: string | null;
  /** The last step's snapshot (TAG is built on it); null when nothing ran in a VM. */
  snapshot: string | null;
  config: BuildConfig;
  steps: BuildStepResult[];
  duration_ms: number;
}

/** `forkd build` (docs/build.md): a Dockerfile and its context into a snapshot, every step cached. */
export interface BuildService {
  /** The context is a tar stream (the REST body); aborting `signal` stops the build. */
  build(
    query: BuildQueryT,
    context: Readable,
    caller: Caller,
    onEvent?: (e: BuildEvent) => void,
    signal?: AbortSignal,
  ): Promise<BuildResult>;
  /** Remove the step snapshots nothing uses. */
  prune(): Promise<string[]>;
}

/** Portable snapshots (docs/packs.md): a snapshot with its chain and image, as a file or an OCI artifact. */
export interface PackService {
  /** Write TAG's pack (tar+zstd) to `file` on the daemon host. */
  pack(tag: string, file: string, onProgress?: (m: string) => void): Promise<PackResultT>;
  /** Verify a pack in full, then install it; `force` replaces a snapshot of the top's tag. */
  unpack(
    file: string,
    opts?: { tag?: string; force?: boolean },
    onProgress?: (m: string) => void,
  ): Promise<UnpackResultT>;
  /** Push TAG as an OCI artifact under `reference`, uploading only the blobs the registry lacks. */
  push(
    tag: string,
    reference: string,
    onProgress?: (m: string) => void,
    signal?: AbortSignal,
    opts?: { format?: 'chunks' | 'files' },
  ): Promise<PushResultT>;
  /** Pull a pushed snapshot (or an https:// pack file) with its chain, and install it. */
  pull(
    req: PullSnapshotT,
    onProgress?: (m: string) => void,
    signal?: AbortSignal,
  ): Promise<UnpackResultT>;
  /** What the node cache holds (chunks, snapshots pulled by reference) and its counters. */
  cacheInfo(): Promise<CacheInfoT>;
  /** Evict down to the limit (`all`: everything not in use). */
  pruneCache(opts: { all?: boolean }): Promise<CachePruneResultT>;
}
