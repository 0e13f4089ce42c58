/**
 * The wire names behind the SDK's camelCase types: one table per contract object, used to
 * convert answers (and, for the CLI's `--json`, back). test/sdk/wire.test.ts compares these
 * tables with the properties of src/contract/schemas.ts, so a renamed field fails a test instead
 * of silently reading `undefined`. Exported as `@forkd/sdk/wire`; not a stable API.
 */
import type { BranchResult } from './branch.js';
import type { EvalForkResult, Execution, Result } from './contexts.js';
import type {
  CommandResult,
  Egress,
  EgressPolicy,
  EntryInfo,
  PublishedPort,
  SandboxNetwork,
  ImageConfigInfo,
  BootSnapshotInfo,
  ImageInfo,
  LineageNode,
  IdleOptions,
  PoolBudgetInfo,
  PoolInfo,
  SandboxIdle,
  SandboxInfo,
  SandboxLimits,
  SandboxUsage,
  SnapshotFileInfo,
  SnapshotInfo,
  SnapshotMemoryInfo,
  VerifyReport,
  VersionInfo,
} from './types.js';
import { compact, type ForkResultWire, type IdleBody, type WireError } from './bodies.js';

export * from './bodies.js';

/**
 * SDK field → wire field, for every field of `T`.
 *
 * @example
 * const names: WireNames<{ memoryMib: number }> = { memoryMib: 'memory_mib' };
 */
export type WireNames<T> = { readonly [K in keyof T]-?: string };

/** `Sandbox` in schemas.ts. */
export const SANDBOX: WireNames<SandboxInfo> = {
  id: 'id',
  state: 'state',
  image: 'image',
  snapshot: 'snapshot',
  parent: 'parent',
  memoryMib: 'memory_mib',
  cpus: 'cpus',
  labels: 'labels',
  createdAt: 'created_at',
  expiresAt: 'expires_at',
  pid: 'pid',
  reason: 'reason',
  network: 'network',
  limits: 'limits',
  usage: 'usage',
  confinement: 'confinement',
  unenforced: 'unenforced',
  tier: 'tier',
  idle: 'idle',
};

/** `Sandbox.idle` in schemas.ts; the SDK's milliseconds are the wire's seconds. */
export const SANDBOX_IDLE: WireNames<SandboxIdle> = {
  pauseAfterMs: 'pause_after_s',
  hibernateAfterMs: 'hibernate_after_s',
  source: 'source',
};

/**
 * An `idle` option in its wire form; 0 and null stay (never).
 *
 * @example
 * idleBody({ pauseAfterMs: 1500 }); // { pause_after_s: 2 }
 */
export function idleBody(opts: IdleOptions | undefined): IdleBody | undefined {
  if (!opts) return undefined;
  const s = (ms: number | null | undefined) =>
    ms === undefined || ms === null ? ms : Math.ceil(ms / 1000);
  return compact({
    pause_after_s: s(opts.pauseAfterMs),
    hibernate_after_s: s(opts.hibernateAfterMs),
  });
}

/** Seconds on the wire ↔ milliseconds in the SDK (null: never). */
const scaled = (v: unknown, by: number) => (typeof v === 'number' ? v * by : v);

function idleFromWire(wire: unknown): SandboxIdle {
  const i = fromWire(SANDBOX_IDLE, wire);
  return {
    ...i,
    pauseAfterMs: scaled(i.pauseAfterMs, 1000),
    hibernateAfterMs: scaled(i.hibernateAfterMs, 1000),
  } as SandboxIdle;
}

function idleToWire(idle: SandboxIdle): Record<string, unknown> {
  const out = toWire(SANDBOX_IDLE, idle);
  return {
    ...out,
    pause_after_s: scaled(out.pause_after_s, 0.001),
    hibernate_after_s: scaled(out.hibernate_after_s, 0.001),
  };
}

/** `Sandbox.limits` in schemas.ts. */
export const SANDBOX_LIMITS: WireNames<SandboxLimits> = {
  memoryBytes: 'memory_bytes',
  cpu: 'cpu',
  pids: 'pids',
  cgroup: 'cgroup',
};

/** `Sandbox.usage` in schemas.ts. */
export const SANDBOX_USAGE: WireNames<SandboxUsage> = {
  cpuSeconds: 'cpu_seconds',
  memoryBytes: 'memory_bytes',
  throttledSeconds: 'throttled_seconds',
  oomKills: 'oom_kills',
};

/**
 * SandboxInfo → its wire form (what the CLI prints for `--json`).
 *
 * @example
 * console.log(JSON.stringify(sandboxToWire(sbx.info)));
 */
export function sandboxToWire(info: SandboxInfo): Record<string, unknown> {
  const out = toWire(SANDBOX, info);
  if (info.network) {
    out.network = { mode: info.network.mode, egress: toWire(EGRESS, info.network.egress) };
  }
  if (info.limits) out.limits = toWire(SANDBOX_LIMITS, info.limits);
  if (info.usage) out.usage = toWire(SANDBOX_USAGE, info.usage);
  if (info.idle) out.idle = idleToWire(info.idle);
  return out;
}

/** `ExecResult` in schemas.ts (stdout/stderr are base64 on the wire). */
export const EXEC_RESULT: WireNames<CommandResult> = {
  exitCode: 'exit_code',
  signal: 'signal',
  timedOut: 'timed_out',
  durationMs: 'duration_ms',
  stdout: 'stdout',
  stderr: 'stderr',
};

/** `FileStat` in schemas.ts. */
export const FILE_STAT: WireNames<EntryInfo> = {
  name: 'name',
  kind: 'kind',
  size: 'size',
  mode: 'mode',
  mtimeMs: 'mtime_ms',
  owner: 'owner',
  group: 'group',
  target: 'target',
  xattrs: 'xattrs',
};

/** `Image` in schemas.ts. */
export const IMAGE: WireNames<ImageInfo> = {
  name: 'name',
  format: 'format',
  sizeBytes: 'size_bytes',
  diskBytes: 'disk_bytes',
  createdAt: 'created_at',
  source: 'source',
  config: 'config',
  bootSnapshots: 'boot_snapshots',
  warnings: 'warnings',
  cache: 'cache',
};

/** `BootSnapshotRef` in schemas.ts (an Image's `boot_snapshots`). */
export const BOOT_SNAPSHOT_REF: WireNames<BootSnapshotInfo> = {
  tag: 'tag',
  memoryMib: 'memory_mib',
  cpus: 'cpus',
  network: 'network',
  physicalBytes: 'physical_bytes',
  current: 'current',
};

/** `ImageConfig` in schemas.ts (an Image's `config`). */
export const IMAGE_CONFIG: WireNames<ImageConfigInfo> = {
  env: 'env',
  workingDir: 'working_dir',
  user: 'user',
  entrypoint: 'entrypoint',
  cmd: 'cmd',
};

/** An Image on the wire → ImageInfo (its config's names too). */
export function imageFromWire(wire: unknown): ImageInfo {
  const info = fromWire(IMAGE, wire);
  if (info.config) info.config = fromWire(IMAGE_CONFIG, info.config);
  if (info.bootSnapshots) {
    info.bootSnapshots = info.bootSnapshots.map((b) => fromWire(BOOT_SNAPSHOT_REF, b));
  }
  return info;
}

/** An ImageInfo → its wire form (`forkd images --json` prints the daemon's so). */
export function imageToWire(info: ImageInfo): Record<string, unknown> {
  const out = toWire(IMAGE, info);
  if (info.config) out.config = toWire(IMAGE_CONFIG, info.config);
  if (info.bootSnapshots) {
    out.boot_snapshots = info.bootSnapshots.map((b) => toWire(BOOT_SNAPSHOT_REF, b));
  }
  return out;
}

/** A streamed pull or import's NDJSON events (`ImageEvent`). */
export type ImageEvent =
  | { type: 'progress'; message: string; layer?: string; current?: number; total?: number }
  | { type: 'done'; image: unknown }
  | { type: 'error'; error: WireError };

/** `Snapshot` in schemas.ts (`files` and `pool` have tables of their own). */
export const SNAPSHOT: WireNames<SnapshotInfo> = {
  tag: 'tag',
  state: 'state',
  bootable: 'bootable',
  reason: 'reason',
  image: 'image',
  parent: 'parent',
  sourceSandbox: 'source_sandbox',
  memoryMib: 'memory_mib',
  cpus: 'cpus',
  labels: 'labels',
  createdAt: 'created_at',
  kernel: 'kernel',
  qemu: 'qemu',
  files: 'files',
  logicalBytes: 'logical_bytes',
  physicalBytes: 'physical_bytes',
  childrenAlive: 'children_alive',
  pool: 'pool',
  depth: 'depth',
  ancestors: 'ancestors',
  dependents: 'dependents',
  memory: 'memory',
  origin: 'origin',
  boot: 'boot',
  user: 'user',
  workdir: 'workdir',
};

/** `SnapshotMemory` in schemas.ts (a Snapshot's `memory`). */
export const SNAPSHOT_MEMORY: WireNames<SnapshotMemoryInfo> = {
  kind: 'kind',
  parent: 'parent',
  logicalBytes: 'logical_bytes',
  storedBytes: 'stored_bytes',
  materializedBytes: 'materialized_bytes',
  depth: 'depth',
};

/** `SnapshotFile` in schemas.ts. */
export const SNAPSHOT_FILE: WireNames<SnapshotFileInfo> = {
  name: 'name',
  size: 'size',
  allocated: 'allocated',
  sha256: 'sha256',
};

/**
 * A wire pool state; an older daemon sends no `prewarm` nor `memory_bytes`, nor `held` and
 * `budget` (then the pool is held back by nothing, and the budget is unknown).
 */
export function poolFromWire(wire: unknown): PoolInfo {
  const pool = fromWire(POOL_STATE, wire);
  return {
    ...pool,
    prewarm: pool.prewarm ?? false,
    memoryBytes: pool.memoryBytes ?? null,
    held: pool.held ?? 0,
    ...(pool.budget ? { budget: fromWire(POOL_BUDGET, pool.budget) } : {}),
  };
}

/** PoolInfo → its wire form (`--json`), the budget's names too. */
export function poolToWire(pool: PoolInfo): Record<string, unknown> {
  const out = toWire(POOL_STATE, pool);
  if (pool.budget) out.budget = toWire(POOL_BUDGET, pool.budget);
  return out;
}

/** `PoolState` in schemas.ts (also a Snapshot's `pool`). */
export const POOL_STATE: WireNames<PoolInfo> = {
  size: 'size',
  ready: 'ready',
  prewarm: 'prewarm',
  memoryBytes: 'memory_bytes',
  held: 'held',
  budget: 'budget',
};

/** `PoolBudgetState` in schemas.ts (a pool state's `budget`). */
export const POOL_BUDGET: WireNames<PoolBudgetInfo> = {
  vms: 'vms',
  memoryBytes: 'memory_bytes',
  usedVms: 'used_vms',
  usedMemoryBytes: 'used_memory_bytes',
};

/** `VerifyResult` in schemas.ts. */
export const VERIFY_RESULT: WireNames<VerifyReport> = { ok: 'ok', problems: 'problems' };

/** The items of `VerifyResult.problems`. */
export const VERIFY_PROBLEM: WireNames<VerifyReport['problems'][number]> = {
  file: 'file',
  problem: 'problem',
};

/** `ForkResult` in schemas.ts; its `sandboxes` are `Sandbox`es. */
export const FORK_RESULT: WireNames<ForkResultWire> = { sandboxes: 'sandboxes', failed: 'failed' };

/** The items of `ForkResult.failed`. */
export const FORK_FAILURE: WireNames<ForkResultWire['failed'][number]> = {
  index: 'index',
  error: 'error',
};

/** `BranchResult` in schemas.ts; its `snapshot` is a `Snapshot`, its `children` a `ForkResult`. */
export const BRANCH_RESULT: WireNames<BranchResult> = {
  snapshot: 'snapshot',
  mode: 'mode',
  pauseMs: 'pause_ms',
  capturedBytes: 'captured_bytes',
  timings: 'timings',
  children: 'children',
};

/** The items of `Lineage.nodes` in schemas.ts (`parent` is `{kind, id}` on both sides). */
export const LINEAGE_NODE: WireNames<LineageNode> = {
  kind: 'kind',
  id: 'id',
  parent: 'parent',
  state: 'state',
  createdAt: 'created_at',
};

/** A lineage node's `parent` edge, when it has one. */
export const LINEAGE_EDGE: WireNames<NonNullable<LineageNode['parent']>> = {
  kind: 'kind',
  id: 'id',
};

/**
 * A wire `Snapshot` → SnapshotInfo, its files and pool converted too.
 *
 * @example
 * const info = snapshotFromWire(await transport.json({ method: 'GET', path: '/v1/snapshots/py' }));
 */
export function snapshotFromWire(wire: unknown): SnapshotInfo {
  const info = fromWire(SNAPSHOT, wire);
  return {
    ...info,
    files: (info.files ?? []).map((f) => fromWire(SNAPSHOT_FILE, f)),
    pool: poolFromWire(info.pool),
    // A daemon older than chains sends none of these: every snapshot is standalone there.
    depth: info.depth ?? 0,
    ancestors: info.ancestors ?? [],
    dependents: info.dependents ?? [],
    ...(info.memory ? { memory: fromWire(SNAPSHOT_MEMORY, info.memory) } : {}),
  };
}

/** `EvalResult` in contract/eval.ts (an Execution's `results[]`). */
export const EVAL_RESULT: WireNames<Pick<Result, 'isMainResult' | 'data'>> = {
  isMainResult: 'is_main_result',
  data: 'data',
};

/** `Execution` in contract/eval.ts. */
export const EXECUTION: WireNames<Execution> = {
  results: 'results',
  logs: 'logs',
  error: 'error',
  text: 'text',
  executionCount: 'execution_count',
  durationMs: 'duration_ms',
};

/**
 * An Execution → its wire form, what `POST /v1/sandboxes/:id/eval` answers (and `forkd
 * eval --json` prints): snake_case, and `text` null when the cell ended with no value.
 *
 * @example
 * console.log(JSON.stringify(executionToWire(await sandbox.eval('6 * 7'))));
 */
export function executionToWire(x: Execution): Record<string, unknown> {
  return {
    ...toWire(EXECUTION, x),
    results: x.results.map((r) => toWire(EVAL_RESULT, r)),
    text: x.text ?? null,
  };
}

/** An EvalForkResult → its wire form (`POST /v1/sandboxes/:id/eval-fork`'s answer). */
export function evalForkToWire(out: EvalForkResult): Record<string, unknown> {
  return {
    snapshot: out.snapshot,
    results: out.results.map((r) => ({
      ...r,
      execution: r.execution && executionToWire(r.execution),
    })),
  };
}

/** `Version` in schemas.ts. */
export const VERSION_INFO: WireNames<VersionInfo> = {
  version: 'version',
  api: 'api',
  qemu: 'qemu',
  accel: 'accel',
};

/**
 * A wire object → its SDK type. Fields the SDK does not know are dropped (clients ignore
 * unknown response fields); absent optional fields stay absent.
 *
 * @example
 * const info = fromWire(SANDBOX, await res.json());
 */
export function fromWire<T>(names: WireNames<T>, wire: unknown): T {
  const source = (wire ?? {}) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [field, wireName] of Object.entries(names) as [string, string][]) {
    if (wireName in source) out[field] = source[wireName];
  }
  return out as T;
}

/**
 * An SDK object → its wire form (the REST API's shape, which the CLI prints for `--json`).
 *
 * @example
 * JSON.stringify(toWire(SANDBOX, sandbox.info)); // {"id":…,"memory_mib":256,…}
 */
export function toWire<T extends object>(names: WireNames<T>, value: T): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [field, wireName] of Object.entries(names) as [keyof T & string, string][]) {
    if (value[field] !== undefined) out[wireName] = value[field];
  }
  return out;
}

// ---- network ----------------------------------------------------------------------------

/** `Egress` fields. */
export const EGRESS: WireNames<Egress> = {
  none: 'none',
  allowInternet: 'allow_internet',
  allowOut: 'allow_out',
  denyOut: 'deny_out',
};

/** `PublishedPort` fields. */
export const PUBLISHED_PORT: WireNames<PublishedPort> = {
  port: 'port',
  hostPort: 'host_port',
  host: 'host',
};

/** `SandboxNetwork` fields (egress and ports are converted by {@link networkFromWire}). */
export const SANDBOX_NETWORK: WireNames<SandboxNetwork> = {
  mode: 'mode',
  isolation: 'isolation',
  egress: 'egress',
  address: 'address',
  denied: 'denied',
  ports: 'ports',
};

/**
 * An egress policy to send, in the contract's names (`EgressPolicy`).
 *
 * @example
 * egressToWire({ allowOut: ['pypi.org'] }); // { allow_out: ['pypi.org'] }
 */
export function egressToWire(p: EgressPolicy | undefined): unknown {
  if (p === undefined || p === 'none') return p;
  return compact({ allow_internet: p.allowInternet, allow_out: p.allowOut, deny_out: p.denyOut });
}

/**
 * A `SandboxNetwork` from the wire, nested objects included.
 *
 * @example
 * const net = networkFromWire(await res.json());
 */
export function networkFromWire(wire: unknown): SandboxNetwork {
  const n = fromWire(SANDBOX_NETWORK, wire);
  const ports = (n.ports ?? []) as unknown[];
  return {
    ...n,
    egress: fromWire(EGRESS, n.egress),
    ports: ports.map((p) => fromWire(PUBLISHED_PORT, p)),
  };
}

/**
 * A `Sandbox` from the wire, its network (when running), limits and usage converted too.
 *
 * @example
 * const info = sandboxFromWire(await res.json());
 */
export function sandboxFromWire(wire: unknown): SandboxInfo {
  const info = fromWire(SANDBOX, wire);
  if (info.network)
    info.network = { mode: info.network.mode, egress: fromWire(EGRESS, info.network.egress) };
  if (info.limits) info.limits = fromWire(SANDBOX_LIMITS, info.limits);
  if (info.usage) info.usage = fromWire(SANDBOX_USAGE, info.usage);
  if (info.idle) info.idle = idleFromWire(info.idle);
  return info;
}
