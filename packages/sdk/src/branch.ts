/**
 * Branching: capture a running sandbox (memory, devices and disk from one instant) into a
 * new snapshot while it keeps running, and optionally fork children of that snapshot in
 * the same call. `sandbox.branch()` is the entry point; this module holds its options,
 * its result and the request.
 */
import type { CallOptions, Forkd } from './client.js';
import { forkResultOf, snapshotOf, type ForkResult, type Snapshot } from './snapshots.js';
import type { EgressPolicy, IdleOptions } from './types.js';
import {
  compact,
  egressToWire,
  idleBody,
  snapshotFromWire,
  type BranchBody,
  type BranchResultWire,
} from './wire.js';

/**
 * How to branch a sandbox.
 *
 * @example
 * const { snapshot, children } = await sbx.branch({ tag: 'step-3', fork: 4, labels: { step: '3' } });
 */
export interface BranchOptions extends CallOptions {
  /** The new snapshot's tag (default: one the daemon picks). */
  tag?: string;
  /** Also fork this many children (0–100) of the new snapshot, in the same call. */
  fork?: number;
  /** Labels of the new snapshot. */
  labels?: Record<string, string>;
  /**
   * Answer as soon as the source resumed: the snapshot is `writing` until its files are
   * complete and checksummed (poll `snapshot.refresh()`), then `ready` or `failed`. Cannot
   * be combined with `fork`.
   */
  noWait?: boolean;
  /**
   * `copy`: the memory the source wrote is copied while it is stopped, so the pause grows
   * with it. `live`: the source is stopped only to take a copy-on-write view of its memory
   * (a few ms, whatever it wrote), which is copied after it resumed; needs a host where
   * `forkd doctor` reports live branch available (else `SetupRequiredError`). Default: the
   * daemon's `--branch-mode`, by default `live` where the host can, else `copy`.
   */
  mode?: BranchMode;
  /**
   * The new snapshot's egress policy, merged over the source's (fields left out are
   * inherited; `'none'` replaces it): its children (`fork`, later forks) get it. The source
   * keeps its own.
   */
  egress?: EgressPolicy;
  /**
   * With `fork`: the children's idle policy (left out: the daemon's defaults; a snapshot
   * carries none, so neither the source's nor later forks' are touched; docs/idle.md).
   */
  idle?: IdleOptions;
}

/** How a branch takes the source's memory: see {@link BranchOptions.mode}. */
export type BranchMode = 'copy' | 'live';

/**
 * What a branch made: the new snapshot, how long the source was paused, how much written
 * memory was captured, and the children of `fork`.
 *
 * @example
 * const { snapshot, pauseMs, capturedBytes } = await sbx.branch();
 * console.log(`${snapshot.tag}: paused ${pauseMs} ms, copied ${capturedBytes} bytes`);
 */
export interface BranchResult {
  snapshot: Snapshot;
  /** How the memory was taken. */
  mode: BranchMode;
  /** How long the source was stopped (stop → cont). */
  pauseMs: number;
  /** Memory the source had written (0 for a `noWait` live branch: still being copied). */
  capturedBytes: number;
  /** The daemon's timings of each step, in ms (names may change between versions). */
  timings: Record<string, number>;
  /** With `fork`: the children that came up and those that did not. */
  children?: ForkResult;
}

/**
 * POST /v1/sandboxes/:id/branch. For Sandbox's `branch`: not exported from the package.
 *
 * @example
 * const result = await branchSandbox(client, 'sbx-0123456789ab', { tag: 'b1' });
 */
export async function branchSandbox(
  client: Forkd,
  id: string,
  opts: BranchOptions,
): Promise<BranchResult> {
  const body: BranchBody = compact({
    tag: opts.tag,
    fork: opts.fork,
    labels: opts.labels,
    no_wait: opts.noWait,
    mode: opts.mode,
    egress: egressToWire(opts.egress),
    idle: idleBody(opts.idle),
  });
  const wire = await client.transport.json<BranchResultWire>({
    method: 'POST',
    path: `/v1/sandboxes/${encodeURIComponent(id)}/branch`,
    json: body,
    signal: opts.signal,
  });
  const result: BranchResult = {
    snapshot: snapshotOf(client, snapshotFromWire(wire.snapshot)),
    mode: wire.mode,
    pauseMs: wire.pause_ms,
    capturedBytes: wire.captured_bytes,
    timings: wire.timings,
  };
  if (wire.children) result.children = forkResultOf(client, wire.children);
  return result;
}
