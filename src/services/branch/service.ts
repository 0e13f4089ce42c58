/**
 * The branch service: a running sandbox becomes a new snapshot while it keeps running
 * (capture.ts), published through the snapshot registry; with `fork` its children are
 * forked by the snapshot service. The source is leased once from the sandbox service
 * (SandboxHost), and after publishing its disk layers on the new snapshot. The disk switch
 * is recorded before it is made; at start the ones a crash left are finished or undone
 * (recover.ts). Its memory is stored as a diff over the snapshot the source came from
 * (snapshots/memory.ts).
 */
import { FORK_MAX } from '../../contract/rules.js';
import type { BranchModeT, BranchRequestT } from '../../contract/schemas.js';
import type { Paths } from '../../config.js';
import { checkRange } from '../checks.js';
import type { BranchOutcome, BranchService, Caller } from '../contracts.js';
import { locateGuest } from '../guest.js';
import type { Lease, SandboxHost } from '../sandboxes/host.js';
import { memPathOf } from '../sandboxes/sandbox.js';
import { silentLog, type ServiceLog } from '../log.js';
import { validateTag, type SnapshotConfig, type SnapshotManifest } from '../snapshots/files.js';
import { inheritedFromSnapshot } from '../snapshots/hooks.js';
import { diffAgainst, memoryChainProblem, memoryId } from '../snapshots/memory.js';
import type { SnapshotMeta } from '../snapshots/registry.js';
import type { SnapshotPublishing } from '../snapshots/publishing.js';
import type { Limits } from '../limits.js';
import { mergeEgress, OPEN_EGRESS, type Egress } from '../network/policy.js';
import { ForkdError } from '../../errors.js';
import { crashPoint } from '../../util/crash.js';
import type { BranchIntentRows } from '../../store/intents.js';
import { asDiskFull, refuseWhenFull } from '../disk-full.js';
import { abandonBranch, captureBranch, type BranchCapture } from './capture.js';
import { BranchModes } from './mode.js';
import { CopyRoom } from './room.js';
import { recoverIntents, sweepStrayLayers } from './recover.js';
import type { RamRegion } from '../../drivers/vmm.js';

/** How long a branch waits for its source's guest to write its dirty page cache out. */
const FLUSH_WAIT_MS = 5_000;

export interface BranchServiceOptions {
  paths: Paths;
  sandboxes: SandboxHost;
  /** Where branches publish and fork (snapshots/publishing.ts). */
  snapshots: SnapshotPublishing;
  /** Where branches record their disk switch before making it. */
  intents: BranchIntentRows;
  qemuVersion: () => Promise<string>;
  log?: ServiceLog;
  /** The mode of a branch that names none (default `auto`: live where the host can). */
  branchMode?: BranchModeT | 'auto';
  /** Runs while a branch's source is stopped, after the copy (tests compare RAM there). */
  whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void>;
}

/** What an in-process caller (the build service) adds to a branch's manifest. */
export interface BranchExtra {
  config?: SnapshotConfig;
}

/** The source's disk chain held by a branch, until its publish hands it back. */
interface DiskHold {
  unlock: () => void;
  handed: boolean;
}

export class BranchManager implements BranchService {
  private readonly log: ServiceLog;
  private readonly modes: BranchModes;

  constructor(private readonly opts: BranchServiceOptions) {
    this.log = opts.log ?? silentLog;
    this.modes = new BranchModes(opts.branchMode);
  }

  /** Settle the disk switches of branches a crash cut short, sweep stray layers. Call once before serving. */
  async start(): Promise<void> {
    const ctx = { rows: this.opts.intents, sandboxes: this.opts.sandboxes, log: this.log };
    await recoverIntents({ ...ctx, published: (tag) => this.opts.snapshots.isPublished(tag) });
    await sweepStrayLayers(ctx);
  }

  /**
   * `extra.config`: the build config the snapshot records (a build's result; docs/build.md),
   * in place of the one its source's snapshot had.
   */
  async branch(
    id: string,
    req: BranchRequestT,
    caller: Caller,
    extra: BranchExtra = {},
  ): Promise<BranchOutcome> {
    const tag = req.tag ?? `${id}.${Date.now().toString(36)}`;
    validateTag(tag);
    if (req.fork !== undefined) checkRange('fork', req.fork, { min: 0, max: FORK_MAX });
    this.opts.sandboxes.idlePolicy(req.idle); // the children's: refused before the capture
    // The source's disk chain is ours until the branch is published or undone (a no_wait
    // branch publishes after the answer): another branch of it, or a snapshot removal
    // folding a layer into it, waits, and leases the chain as this one left it.
    const chain: DiskHold = { unlock: await this.opts.sandboxes.lockDisk(id), handed: false };
    try {
      return await this.branchHeld(id, tag, req, caller, chain, extra);
    } finally {
      if (!chain.handed) chain.unlock();
    }
  }

  private async branchHeld(
    id: string,
    tag: string,
    req: BranchRequestT,
    caller: Caller,
    chain: DiskHold,
    extra: BranchExtra,
  ): Promise<BranchOutcome> {
    const source = await this.opts.sandboxes.lease(id);
    if (source.diskProblem !== null) {
      throw new ForkdError(
        'sandbox_broken',
        `sandbox ${id} cannot be branched: ${source.diskProblem}`,
        {
          sandbox: id,
          reason: source.diskProblem,
        },
      );
    }
    const egress = branchEgress(source, req.egress);
    const over = await this.memoryParent(source);
    await refuseWhenFull(this.opts.paths.snapshots, `branch of ${id}`);
    const chosen = await this.modes.choose(req.mode, source.vm.pid);
    const room = await CopyRoom.take(source, chosen, req.mode !== undefined, this.log).catch(
      async (e: unknown) => {
        throw await this.failed(e, source, tag, chosen);
      },
    );
    const { mode } = room;
    const release = () => room.release();
    try {
      this.opts.snapshots.reserve(tag, id);
    } catch (e) {
      await release();
      throw e;
    }
    let captured: BranchCapture | undefined;
    let published: Promise<SnapshotManifest> | undefined;
    const warn = (err: unknown) =>
      this.log.warn({ sandbox: id, snapshot: tag, err }, 'could not repair the disk chain');
    try {
      await this.flushGuest(source, tag);
      captured = await captureBranch(this.opts.paths, source, tag, {
        mode,
        start: over ? 'empty' : 'base',
        whileStopped: this.opts.whileStopped,
        beforeResume: (shared) => room.topUp(shared),
        intents: this.opts.intents,
        warn,
      }).catch(async (e: unknown) => {
        await release();
        throw e;
      });
      void captured.capture.pages.then(release, release);
      const meta = { ...(await this.meta(tag, source, req, over, egress)), ...extra };
      this.opts.snapshots.describe(meta); // shown, with its reason, should it fail or be cut off
      published = this.publish(source, captured, meta, { warn, over, noWait: req.no_wait });
      // Released once published or undone, not after the children's fork.
      void published.then(chain.unlock, chain.unlock);
      chain.handed = true;
      const { capture } = captured;
      const answer = async (wait: boolean) => {
        const pages = wait ? await capture.pages : undefined;
        const result = {
          mode,
          pause_ms: capture.pauseMs,
          captured_bytes: pages?.bytes ?? 0,
          timings: pages ? { ...capture.timings, copy_ms: pages.ms } : capture.timings,
        };
        this.log.info(
          { snapshot: tag, sandbox: id, ...result, principal: caller.principal },
          'sandbox branched',
        );
        return result;
      };
      if (req.no_wait) {
        void published.catch(() => undefined);
        // A live copy is still running at resume: its size is known once it is `ready`.
        const result = await answer(mode === 'copy');
        return { snapshot: this.opts.snapshots.writing(meta, source.vm.spec.dir), ...result };
      }
      const snapshot = await this.opts.snapshots.toWire(await published);
      const result = await answer(true);
      if (!req.fork) return { snapshot, ...result };
      const children = await this.opts.snapshots.fork(
        { snapshot: tag, n: req.fork, labels: req.labels, idle: req.idle },
        caller,
      );
      return { snapshot, ...result, children };
    } catch (e) {
      if (!published) {
        // Captured but not handed to publish (its row could not be written: a full disk
        // fails SQLite too): the live copy ends, then the branch is undone as publish would.
        if (captured) await this.undoCapture(source, captured, warn);
        await this.opts.snapshots.release(tag);
      }
      throw await this.failed(e, source, tag, mode);
    }
  }

  /** The error a failed branch answers, once it is undone. */
  private async failed(e: unknown, source: Lease, tag: string, mode: BranchModeT) {
    // A source killed mid-branch fails with whatever broke first (a closed monitor, its
    // /proc entry gone, a refused ptrace that reads like a seccomp denial): say what happened.
    if (await source.vm.gone()) {
      return diedDuringBranch(source.id, tag, mode, await source.deathReason().catch(() => null));
    }
    // Undone by now (staging removed, disk switch folded back): what is free is what is left.
    return asDiskFull(e, this.opts.paths.snapshots, `branch of ${source.id}`);
  }

  /**
   * The snapshot a branch's memory is stored as a diff over: the one the source's disk layers
   * on (its newest branch) if the source made it, else the one it was forked from (the file
   * its RAM maps). Pages the source never wrote are that snapshot's in both: a diff needs only
   * the written pages that differ. Null for a sandbox booted from an image and never branched
   * (its RAM base is zero: the written pages are the whole memory), one whose RAM maps its
   * own hibernation's memory since a wake (the pages it did not write since are not the
   * snapshot's), or a broken chain.
   */
  private async memoryParent(source: Lease): Promise<SnapshotManifest | null> {
    const ramBase = source.info.snapshot ?? null;
    if (source.vm.spec.memPath !== memPathOf(this.opts.paths, ramBase)) return null;
    for (const tag of [source.diskBase, ramBase]) {
      if (!tag || !this.opts.snapshots.isPublished(tag)) continue;
      const m = await this.opts.snapshots.manifest(tag).catch(() => undefined);
      if (!m || (tag !== ramBase && m.source_sandbox !== source.id)) continue;
      if (!(await memoryChainProblem(this.opts.paths, m))) return m;
    }
    return null;
  }

  /** What the manifest says of a branch: built on the snapshot its source's disk layers on. */
  private async meta(
    tag: string,
    source: Lease,
    req: BranchRequestT,
    over: SnapshotManifest | null,
    egress: Egress | undefined,
  ): Promise<SnapshotMeta> {
    return {
      tag,
      image: source.info.image,
      parent: source.diskBase,
      source_sandbox: source.id,
      kernel: (await locateGuest(this.opts.paths)).kernelVersion,
      qemu: await this.opts.qemuVersion(),
      accel: source.vm.spec.accel,
      memory_mib: source.info.memory_mib,
      cpus: source.info.cpus,
      device_set: source.vm.spec.deviceSet ?? 1,
      created_at: new Date().toISOString(),
      labels: req.labels ?? {},
      ...(over ? { memory_diff: { parent: over.tag, parent_memory_id: memoryId(over) } } : {}),
      network: source.vm.spec.net ? 'nat' : 'none',
      ...(egress ? { egress } : {}),
      ...inheritedLimits(source.info),
      ...(await inheritedFromSnapshot(this.opts.paths, source.info.snapshot)),
    };
  }

  /**
   * The source's dirty page cache written out before the capture, so its children do not
   * each repeat the writeback after their restore. Best effort, bounded: a guest with much
   * to write is captured as it is once FLUSH_WAIT_MS have passed (its writeback goes on).
   */
  private async flushGuest(source: Lease, tag: string): Promise<void> {
    await source.flush({ timeoutMs: FLUSH_WAIT_MS }).catch((err: unknown) => {
      this.log.warn({ sandbox: source.id, snapshot: tag, err }, 'guest flush before branch');
    });
  }

  /** Undo a capture that was never published: staging removed, disk switch undone. */
  private async undoCapture(source: Lease, c: BranchCapture, warn: (err: unknown) => void) {
    await c.capture.pages.catch(() => undefined);
    await abandonBranch(source, c.staging, c.intent, { intents: this.opts.intents, warn });
  }

  /**
   * Once published, the source's disk layers on the new snapshot (it depends on it). A
   * failure leaves nothing under the tag; a `no_wait` branch's (its caller was answered
   * `writing` already) is listed `failed` with why.
   */
  private publish(
    source: Lease,
    captured: BranchCapture,
    meta: SnapshotMeta,
    opts: { warn: (err: unknown) => void; over: SnapshotManifest | null; noWait?: boolean },
  ) {
    const { staging, capture, intent } = captured;
    const { warn, over } = opts;
    // Once every written page is in the file, those equal to the parent's are punched out.
    const stored = capture.pages.then(async (pages) => {
      if (over) await diffAgainst(this.opts.paths, staging, over);
      crashPoint('branch:diffed');
      return pages;
    });
    const keepFailed = Boolean(opts.noWait);
    return this.opts.snapshots.publish(meta.tag, staging, meta, { ready: stored, keepFailed }).then(
      (m) => {
        source.setDiskBase(meta.tag);
        this.opts.intents.clear(meta.tag);
        return m;
      },
      async (e: unknown) => {
        await abandonBranch(source, staging, intent, { intents: this.opts.intents, warn });
        throw await asDiskFull(e, this.opts.paths.snapshots, `branch of ${source.id}`);
      },
    );
  }
}

/** The source died mid-branch: why (an OOM kill says so), and what to do. */
export function diedDuringBranch(
  id: string,
  tag: string,
  mode: BranchModeT,
  reason: string | null,
): ForkdError {
  const oom = reason?.startsWith('out of memory') ?? false;
  const remedy = oom
    ? `give it a larger memory limit (\`forkd update ${id} --memory-limit SIZE\`)${mode === 'live' ? ', or branch with mode "copy"' : ''}`
    : 'its console log (`forkd logs`) may say more';
  return new ForkdError(
    'sandbox_not_running',
    `sandbox ${id} died during its ${mode} branch${reason ? ` (${reason})` : ' (its QEMU exited)'}: nothing was made under "${tag}"; ${remedy}`,
    { id, state: 'dead', mode, ...(reason ? { reason } : {}) },
  );
}

/** A branch's children inherit its source's limits (the cgroup version is the host's, not theirs). */
function inheritedLimits(info: Lease['info']): { limits?: Limits } {
  if (!info.limits) return {};
  const { memory_bytes, cpu, pids } = info.limits;
  return { limits: { memory_bytes, cpu, pids } };
}

/**
 * The policy a branch records (its children inherit it): the source's, with the request's
 * override merged over it as a fork request's is (`none` replaces it all).
 */
function branchEgress(source: Lease, override: BranchRequestT['egress']): Egress | undefined {
  const inherited = source.info.network?.egress;
  if (override === undefined) return inherited;
  if (!source.vm.spec.net) {
    throw new ForkdError(
      'bad_request',
      `sandbox ${source.id} has no network (network none): a branch of it takes no egress policy`,
      { field: 'egress', sandbox: source.id },
    );
  }
  return mergeEgress(inherited ?? OPEN_EGRESS, override);
}
