/**
 * The request bodies the SDK sends, as the contract names their fields, and the small
 * helpers that build them (units, undefined fields dropped). Re-exported by wire.ts
 * (`@forkd/sdk/wire`); not a stable API.
 */
import type { LimitsOptions, NetworkMode } from './types.js';

/** `IdlePolicyRequest` (create, fork) and `IdlePolicyChange` (PATCH): SDK ms → wire seconds, rounded up. */
export interface IdleBody {
  pause_after_s?: number | null;
  hibernate_after_s?: number | null;
}

/** `CreateSandbox`: a boot from an image, or a fork of `snapshot` (`n` children). */
export interface CreateSandboxBody {
  image?: string;
  memory_mib?: number;
  cpus?: number;
  env?: Record<string, string>;
  timeout_s?: number;
  labels?: Record<string, string>;
  snapshot?: string;
  n?: number;
  all_or_nothing?: boolean;
  network?: NetworkMode;
  egress?: unknown;
  limits?: LimitsBody;
  idle?: IdleBody;
  netns?: string;
  forward_ports?: number[];
  cold?: boolean;
}

/** `LimitsRequest`: memory as a size with a unit (bytes when a number is given). */
export interface LimitsBody {
  memory?: string;
  cpu?: number;
  pids?: number;
}

/**
 * The SDK's limits options as the wire takes them (undefined when none are given).
 *
 * @example
 * limitsBody({ memory: 512 * 1024 * 1024, cpu: 0.5 }); // { memory: '536870912', cpu: 0.5 }
 */
export function limitsBody(opts: LimitsOptions | undefined): LimitsBody | undefined {
  if (!opts) return undefined;
  const memory = opts.memory === undefined ? undefined : String(opts.memory);
  return compact({ memory, cpu: opts.cpu, pids: opts.pids });
}

/** `CreateSnapshot`. */
export interface CreateSnapshotBody {
  tag: string;
  image?: string;
  memory_mib?: number;
  cpus?: number;
  env?: Record<string, string>;
  warm?: string[];
  start?: string[];
  wait_for?: string;
  wait_port?: number;
  wait_timeout_s?: number;
  labels?: Record<string, string>;
  network?: NetworkMode;
  egress?: unknown;
  stream?: boolean;
  contexts?: string[];
  eval?: string[];
  on_fork?: string[];
  user?: string;
  workdir?: string;
}

/** `BranchRequest`. */
export interface BranchBody {
  tag?: string;
  fork?: number;
  labels?: Record<string, string>;
  no_wait?: boolean;
  mode?: 'copy' | 'live';
  egress?: unknown;
  idle?: IdleBody;
}

/** `BranchResult`: the new snapshot, the source's pause, and the children of `fork`. */
export interface BranchResultWire {
  snapshot: unknown;
  mode: 'copy' | 'live';
  pause_ms: number;
  captured_bytes: number;
  timings: Record<string, number>;
  children?: ForkResultWire;
}

/** A wire error object, as in error answers and `error` events. */
export interface WireError {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

/** `ForkResult`: the answer to a fork of `n`. */
export interface ForkResultWire {
  sandboxes: unknown[];
  failed: { index: number; error: WireError }[];
}

/** A streamed snapshot create's NDJSON events (`SnapshotEvent`). */
export type SnapshotEvent =
  | { type: 'progress'; message: string }
  | { type: 'done'; snapshot: unknown }
  | { type: 'error'; error: WireError };

/** `ExecRequest`. */
export interface ExecBody {
  argv: string[];
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
  timeout_ms?: number;
  stdin?: string;
  stream?: boolean;
  keep_stdin_open?: boolean;
}

/** A streaming exec's NDJSON events (`ExecEvent`). */
export type ExecEvent =
  | { type: 'started'; exec_id: string; pid: number }
  | { type: 'stdout' | 'stderr'; data: string }
  | {
      type: 'exit';
      exit_code: number | null;
      signal: string | null;
      timed_out: boolean;
      duration_ms: number;
    }
  | { type: 'error'; error: WireError };

/**
 * Milliseconds → the whole seconds the contract counts in, rounded up so a timeout is
 * never shorter than asked.
 *
 * @example
 * toSeconds(1500); // 2
 */
export function toSeconds(ms: number): number {
  return Math.ceil(ms / 1000);
}

/**
 * Drop undefined fields, so a request carries only what the caller set.
 *
 * @example
 * compact({ a: 1, b: undefined }); // { a: 1 }
 */
export function compact<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}
