/**
 * Fork: N sandboxes restored from one snapshot, each its own QEMU mapping the snapshot's
 * memory copy-on-write; each child is handed to the sandbox service through SandboxHost,
 * which owns it from then on. One child is forked in two halves so a pool can do the first
 * ahead of time:
 * `prepareChild` makes its directory and disk overlay and starts a QEMU waiting in
 * `-incoming defer` with the snapshot's device state on fd 3 and its RAM mapped
 * copy-on-write over the snapshot's memory file; `restoreChild` loads the state and
 * connects the agent, pushing fresh time, entropy, id and hostname.
 */
import { randomBytes } from 'node:crypto';
import { open, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import type { AgentClient } from '../../drivers/agent/client.js';
import { ForkdError, isForkdError } from '../../errors.js';
import { crashPoint, holdPoint } from '../../util/crash.js';
import type { StoredIdle, StoredLimits } from '../../store/sandboxes.js';
import type { Caller, ForkOutcome, ForkRequest } from '../contracts.js';
import { mergeEgress, OPEN_EGRESS } from '../network/policy.js';
import type { NetworkManager } from '../network/service.js';
import type { Limiter, Placement } from '../limits.js';
import type { SandboxHost } from '../sandboxes/host.js';
import {
  checkCallerNetns,
  forwardCallerPorts,
  leaseCallerNetns,
} from '../sandboxes/caller-netns.js';
import {
  connectGuest,
  destroySandbox,
  memPathOf,
  newSandboxId,
  OWNER_FILE,
  sandboxDir,
  sandboxVmSpec,
  type Sandbox,
} from '../sandboxes/sandbox.js';
import { asDiskFull } from '../disk-full.js';
import { runForkHooks } from './hooks.js';
import { snapshotDir, SNAPSHOT_FILES, type SnapshotManifest } from './files.js';
import type { Pool } from './pool.js';
import { makeDir } from '../../util/make-dir.js';
import type { VmHandle, VmNet } from '../../drivers/vmm.js';
import { vmm } from '../vmm.js';
import { phase } from '../../util/phases.js';

/** A QEMU ready to become a child of a snapshot. */
export interface PreparedChild {
  id: string;
  dir: string;
  vm: VmHandle;
  /** Set when pre-warmed: restored, its agent connected, run once, then paused. */
  agent?: AgentClient;
  /** Holds its cgroup (removed when the child is discarded). */
  limiter?: Limiter;
}

/**
 * Start a child's QEMU, waiting for its state, in its cgroup when `placement` is given;
 * removes everything again on failure.
 */
export async function prepareChild(
  p: Paths,
  m: SnapshotManifest,
  id: string = newSandboxId(),
  net?: VmNet,
  placement?: Placement,
): Promise<PreparedChild> {
  const { accel } = await vmm().accel();
  if (accel !== m.accel) {
    throw new ForkdError(
      'snapshot_not_bootable',
      `snapshot "${m.tag}" was made under ${m.accel} and this host runs ${accel}: recreate it here`,
      { tag: m.tag },
    );
  }
  const dir = sandboxDir(p, id);
  try {
    await makeDir(dir); // in the try: a dir that cannot be made for want of space is disk_full
    await writeFile(join(dir, OWNER_FILE), `${process.pid}\n`);
    const spec = sandboxVmSpec(
      dir,
      { memoryMiB: m.memory_mib, cpus: m.cpus, accel },
      memPathOf(p, m.tag),
      m.device_set ?? 1,
    );
    await vmm().disks.createOverlay(
      spec.disk,
      join(snapshotDir(p, m.tag), SNAPSHOT_FILES.disk),
      'qcow2',
    );
    const state = await open(join(snapshotDir(p, m.tag), SNAPSHOT_FILES.vmstate), 'r');
    try {
      const onSpawn =
        placement && ((pid: number) => placement.limiter.place(id, placement.limits, pid));
      const vm = await vmm().start(
        { ...spec, net, incoming: true },
        { incomingFd: state.fd, onSpawn },
      );
      return { id, dir, vm, limiter: placement?.limiter };
    } finally {
      await state.close(); // QEMU holds its own copy of the fd
    }
  } catch (e) {
    await placement?.limiter.remove(id);
    await rm(dir, { recursive: true, force: true });
    throw await asDiskFull(e, p.sandboxes, `fork of ${m.tag}`);
  }
}

/**
 * Pre-warm a prepared child for a pool: restore it, connect its agent (pushing its id and
 * hostname), run one command so TCG has translated the exec path, then pause it. The
 * first exec after a restore otherwise costs ~80 ms of translation under TCG.
 */
export async function prewarmChild(child: PreparedChild): Promise<PreparedChild> {
  try {
    await child.vm.restore();
    const agent = await connectGuest(child.vm, child.id, { bootTimeoutMs: 30_000 });
    await agent.run({ argv: ['true'] }).catch((e: unknown) => {
      // An image without `true` (a minimal one) still took the agent's exec path.
      if (!isForkdError(e, 'command_not_found')) throw e;
    });
    await child.vm.pause();
    return { ...child, agent };
  } catch (e) {
    await discardChild(child);
    throw e;
  }
}

/** Resume a pre-warmed child: its clock, entropy and environment are pushed again. */
async function resumeChild(
  child: PreparedChild & { agent: AgentClient },
  env?: Record<string, string>,
): Promise<Sandbox> {
  await child.vm.resume();
  phase('fork: pool member resumed');
  await child.agent.configure({
    timeMs: Date.now(),
    entropy: randomBytes(64),
    env: env ?? {},
    ptyHangup: true,
  });
  phase('agent: configured');
  return { id: child.id, dir: child.dir, vm: child.vm, agent: child.agent };
}

/** Restore a prepared child and hand it over running, agent connected and configured. */
export async function restoreChild(
  child: PreparedChild,
  req: { env?: Record<string, string>; signal?: AbortSignal; bootTimeoutMs?: number },
): Promise<Sandbox> {
  try {
    req.signal?.throwIfAborted();
    if (child.agent) return await resumeChild({ ...child, agent: child.agent }, req.env);
    await child.vm.restore();
    const agent = await connectGuest(child.vm, child.id, {
      env: req.env,
      signal: req.signal,
      bootTimeoutMs: req.bootTimeoutMs ?? 30_000,
    });
    return { id: child.id, dir: child.dir, vm: child.vm, agent };
  } catch (e) {
    await discardChild(child);
    throw e;
  }
}

/** End a prepared child that will not be used. */
export async function discardChild(child: PreparedChild): Promise<void> {
  child.agent?.close();
  await child.vm.kill();
  await child.limiter?.remove(child.id);
  await rm(child.dir, { recursive: true, force: true });
}

/** What a fork needs besides the snapshot. */
export interface ForkContext {
  paths: Paths;
  pool: Pool;
  sandboxes: SandboxHost;
  network?: NetworkManager;
  limiter: Limiter;
}

/** A snapshot's network mode (older manifests have none: no NIC). */
export function networkOf(m: SnapshotManifest): 'none' | 'nat' {
  return m.network ?? 'none';
}

/**
 * A child's NIC, leased for `id`: the same device as its snapshot's (it is in the device
 * state), in a namespace of its own that lets nothing out until its policy is enforced.
 */
export async function leaseNet(
  network: NetworkManager | undefined,
  m: SnapshotManifest,
  id: string,
  netns?: string,
): Promise<VmNet | undefined> {
  if (netns) return leaseCallerNetns(network, id, netns);
  if (!network) return networkOf(m) === 'nat' ? { restrict: true } : undefined;
  return network.lease(id, networkOf(m), m.egress ?? OPEN_EGRESS);
}

/** A fork into a namespace of the caller's (a pod's) needs a snapshot with a NIC to NAT through it. */
export function checkForkNetns(m: SnapshotManifest, req: ForkRequest): Promise<void> {
  return checkCallerNetns(
    req,
    networkOf(m),
    `snapshot "${m.tag}" has no NIC (network none): a fork into a network namespace needs a snapshot made with network nat`,
  );
}

/** A fork may restate its snapshot's network mode but not change it. */
export function checkForkNetwork(m: SnapshotManifest, asked: 'none' | 'nat' | undefined): void {
  if (asked === undefined || asked === networkOf(m)) return;
  throw new ForkdError(
    'bad_request',
    `snapshot "${m.tag}" was made with network ${networkOf(m)}: its forks have the same NIC; ` +
      (asked === 'none'
        ? 'fork it with egress "none" to keep children offline'
        : 'create a snapshot with network nat'),
    { field: 'network', value: asked },
  );
}

/** A child's limits: the fork's, else what its snapshot's source had, else the defaults. */
export function childLimits(
  limiter: Limiter,
  m: SnapshotManifest,
  req?: ForkRequest['limits'],
): Promise<StoredLimits> {
  return limiter.resolve(req, { memoryMiB: m.memory_mib, cpus: m.cpus, inherited: m.limits });
}

/** How a fork is asked for, besides its request. */
export interface ForkOptions {
  /**
   * A start from an image: its boot snapshot's one child, the daemon's choice and not the
   * caller's, so no request label, and no pod allow-list (that is of snapshots pods name).
   */
  imageStart?: boolean;
}

/**
 * Fork `req.n` children of the snapshot `m` at once. Each child that fails is reported
 * with its error; with `all_or_nothing` one failure kills the healthy ones too.
 */
export async function forkChildren(
  ctx: ForkContext,
  m: SnapshotManifest,
  req: ForkRequest,
  caller: Caller,
  opts: ForkOptions = {},
): Promise<ForkOutcome> {
  const labels = opts.imageStart ? req.labels : withRequestLabel(req.labels);
  const limits = await childLimits(ctx.limiter, m, req.limits); // bad_request before any child
  const idle = ctx.sandboxes.idlePolicy(req.idle);
  const settled = await Promise.allSettled(
    Array.from({ length: req.n }, () =>
      forkOne(ctx, m, { ...req, labels }, { limits, idle }, caller),
    ),
  );
  const result: ForkOutcome = { sandboxes: [], failed: [] };
  settled.forEach((s, index) => {
    if (s.status === 'fulfilled') result.sandboxes.push(s.value);
    else result.failed.push({ index, error: s.reason });
  });
  if (result.failed.length > 0 && req.all_or_nothing) {
    await Promise.all(result.sandboxes.map((sb) => ctx.sandboxes.kill(sb.id)));
    result.sandboxes = [];
  }
  return result;
}

/** The label every child of one fork request carries (the caller's value, or a fresh id). */
export const REQUEST_LABEL = 'forkd.request';

/**
 * Children of one request are found by it even if the daemon dies before answering
 * (`forkd ps --label forkd.request=ID`): a caller that wants to look for them after a
 * crash passes its own value; otherwise each request gets a fresh one.
 */
function withRequestLabel(labels: Record<string, string> | undefined): Record<string, string> {
  if (labels?.[REQUEST_LABEL]) return labels;
  return { ...labels, [REQUEST_LABEL]: `req-${randomBytes(6).toString('hex')}` };
}

/**
 * A pooled QEMU was started in a cgroup with its snapshot's limits: the fork's are written
 * over them before it runs a single guest instruction for the fork. Should that fail (it
 * already uses more than a lower memory limit), it is discarded and a fresh one started.
 */
async function handOut(
  ctx: ForkContext,
  pooled: PreparedChild,
  limits: StoredLimits,
): Promise<PreparedChild | undefined> {
  try {
    await ctx.limiter.apply(pooled.id, limits);
    return pooled;
  } catch {
    await discardChild(pooled);
    await ctx.network?.release(pooled.id);
    return undefined;
  }
}

function forkOne(
  ctx: ForkContext,
  m: SnapshotManifest,
  req: ForkRequest,
  { limits, idle }: { limits: StoredLimits; idle: StoredIdle | null },
  caller: Caller,
) {
  // A pool member's QEMU runs in a namespace of forkd's already: a pod's fork starts its own.
  const pooled = req.netns ? undefined : ctx.pool.take(m.tag);
  phase(pooled ? 'fork: pool member taken' : 'fork: pool empty');
  return ctx.sandboxes.createForked(
    {
      id: pooled?.id,
      snapshot: m.tag,
      image: m.image,
      parent: m.source_sandbox,
      memoryMiB: m.memory_mib,
      cpus: m.cpus,
      labels: req.labels,
      env: req.env,
      timeoutS: req.timeout_s,
      limits,
      idle,
      network: networkOf(m),
      egress: mergeEgress(m.egress ?? OPEN_EGRESS, req.egress),
    },
    async ({ id, env, signal, onStarted }) => {
      const handed = pooled && (await handOut(ctx, pooled, limits));
      const placement = { limiter: ctx.limiter, limits };
      const child =
        handed ??
        (await prepareChild(
          ctx.paths,
          m,
          id,
          await leaseNet(ctx.network, m, id, req.netns),
          placement,
        ));
      phase('fork: child started');
      onStarted(child.vm);
      await holdPoint('fork:child-started', String(child.vm.pid));
      if (ctx.network && networkOf(m) === 'nat') {
        await ctx.network.enforce(id, m.egress ?? OPEN_EGRESS, req.egress);
      }
      phase('fork: network enforced');
      const up = await restoreChild(child, { env, signal });
      await forwardCallerPorts(up, req.forward_ports);
      await runForkHooks(up.agent, m.on_fork).catch(async (e: unknown) => {
        await destroySandbox(up);
        throw e;
      });
      crashPoint('fork:child-up');
      return up;
    },
    caller,
  );
}
