/**
 * The one seam between the sandbox service and the services that make snapshots of
 * sandboxes or sandboxes of snapshots (branch, fork, registry, lineage): `SandboxHost`.
 * They reach running sandboxes only through it, never through the manager's internals:
 * a branch leases its source once (its VM, its answer, the snapshot its disk layers on),
 * a fork hands each child's start to `createForked`.
 */
import type { CreateSandboxT, SandboxT } from '../../contract/schemas.js';
import type { StoredIdle, StoredLimits } from '../../store/sandboxes.js';
import type { IdleRequest } from './tiers.js';
import type { Caller } from '../contracts.js';
import type { Sandbox } from './sandbox.js';
import type { Egress } from '../network/policy.js';
import type { VmHandle } from '../../drivers/vmm.js';

/** A running sandbox lent to another service for one operation. */
export interface Lease {
  readonly id: string;
  readonly vm: VmHandle;
  /** The sandbox as the API shows it, at the time of the lease. */
  readonly info: SandboxT;
  /** The snapshot its disk layers on now (null: straight on its image). */
  readonly diskBase: string | null;
  /** After a branch is published the sandbox's disk layers on that snapshot (null: image). */
  setDiskBase(tag: string | null): void;
  /** Why its disk chain could not be repaired (null: healthy), shown as its `reason`. */
  readonly diskProblem: string | null;
  setDiskProblem(reason: string | null): void;
  /**
   * Raise its memory limit by `bytes` until the returned release (a live branch's copy);
   * with `check`, `capacity` when the host cannot give that much more. `what` names the
   * operation in that error.
   */
  lendMemory(bytes: number, what: string, check: boolean): Promise<() => Promise<void>>;
  /**
   * Its guest's dirty page cache written to its disk (the agent's `flush`), before a capture
   * its children restore from: otherwise each child repeats the writeback ~5 s after its
   * restore (docs/idle.md "A fork leaves its disk alone"). Nothing for an older agent.
   */
  flush(opts: { timeoutMs: number }): Promise<void>;
  /** Why it died, once its death is recorded (a branch that lost its source says why). */
  deathReason(): Promise<string | null>;
}

/** What a forked sandbox's `starting` row is made from. */
export interface ForkInit {
  /** The id a pooled VM already carries (its directory is named after it). */
  id?: string;
  snapshot: string;
  image: string | null;
  parent: string | null;
  memoryMiB: number;
  cpus: number;
  labels?: Record<string, string>;
  env?: Record<string, string>;
  timeoutS?: number;
  /** Its resource limits (the fork's, else its snapshot's, else the defaults). */
  limits?: StoredLimits;
  /** Its idle policy as stored (null: the daemon's defaults; a fork's own, never inherited). */
  idle?: StoredIdle | null;
  /** Its NIC and policy (its snapshot's, the fork's egress merged over it): what it asks the host to enforce. */
  network?: 'nat' | 'none';
  egress?: Egress;
}

/** Brings up the VM of a new sandbox row other than by booting an image (a fork). */
export type SandboxStarter = (req: {
  id: string;
  env: Record<string, string>;
  signal: AbortSignal;
  onStarted(vm: VmHandle): void;
}) => Promise<Sandbox>;

/**
 * Starts a sandbox from an image other than by booting it (a fork of its boot snapshot);
 * undefined when it cannot, and the image is booted.
 */
export type ImageStarter = (req: CreateSandboxT, caller: Caller) => Promise<SandboxT | undefined>;

export interface SandboxHost {
  /** A running sandbox (`sandbox_not_found` / `sandbox_not_running` otherwise). */
  lease(id: string): Promise<Lease>;
  /** Record a sandbox forked from a snapshot, start it with `start`, and own it from then on. */
  createForked(init: ForkInit, start: SandboxStarter, caller: Caller): Promise<SandboxT>;
  /**
   * Running sandboxes whose disk depends on a snapshot: forked from it, or branched into it
   * (removal must hold or fold them). Not its children: those are `forkedFrom` only.
   */
  runningOn(tag: string): string[];
  /** Running sandboxes forked from a snapshot (their first overlay sits on its disk): its children. */
  forkedFrom(tag: string): string[];
  /** Running sources whose disk layers on a snapshot they were branched into, not forked from. */
  layeredOn(tag: string): string[];
  kill(id: string): Promise<void>;
  /**
   * Hold a sandbox's disk chain (returns the release): a branch of it and the fold of a
   * removed snapshot into it take turns, so neither finds the chain the other half-changed.
   */
  lockDisk(id: string): Promise<() => void>;
  /** The idle policy a fork's `idle` stores (bad_request when it cannot hold). */
  idlePolicy(req: IdleRequest | undefined): StoredIdle | null;
  list(filter: { state?: SandboxT['state'] }): Promise<SandboxT[]>;
}
