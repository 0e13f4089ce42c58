/**
 * The services wired together, as the daemon runs them (tests and benchmarks wire them the
 * same way, in-process): sandboxes first, since every other service reaches running
 * sandboxes through it (SandboxHost), then snapshots, then branch. `start` reconciles each
 * with the host in that order; `close` ends pool VMs and every sandbox (tests) while
 * `detach` leaves sandboxes running for the next daemon.
 */
import { PodPolicy } from './pod-policy.js';
import type { BranchModeT } from '../contract/schemas.js';
import type { Paths } from '../config.js';
import type { RamRegion } from '../drivers/vmm.js';
import type { Store } from '../store/db.js';
import { BranchManager } from './branch/service.js';
import { ContextManager } from './contexts/service.js';
import type { Services } from './contracts.js';
import { Host } from './host.js';
import { Limiter, type LimitDefaults } from './limits.js';
import { ImageManager } from './images/index.js';
import type { ServiceLog } from './log.js';
import type { ReconcileReport } from './sandboxes/reconcile.js';
import { publishingOf } from './snapshots/publishing.js';
import { SandboxManager } from './sandboxes/service.js';
import { defaultPoolFromEnv, SnapshotManager } from './snapshots/service.js';
import type { PoolBudgetLimits } from './snapshots/pool-budget.js';
import { BootStarts } from './snapshots/boot-start.js';
import { BootRefresh } from './snapshots/boot-refresh.js';
import { silentLog } from './log.js';
import { PackManager } from './packs/service.js';
import { BuildManager } from './build/service.js';
import { NetworkManager } from './network/service.js';
import { SandboxNetworks } from './network/api.js';
import {
  configureConfinement,
  configureTuning,
  protectHome,
  vmTuning,
  wireVmm,
  type VmTuning,
} from './vmm-driver.js';
import { enableKsm } from '../drivers/host/ksm.js';
import { EventFeed } from './events.js';
import { benchResults, doctorReport } from './reports.js';
import { join } from 'node:path';
import { repoRoot } from '../config.js';

export interface ServiceOptions {
  paths: Paths;
  store: Store;
  /** A child logger per service is made from it (`component`). */
  log?: ServiceLog & { child?(bindings: object): ServiceLog };
  maxBooting?: number;
  maxExecs?: number;
  maxCreating?: number;
  bootTimeoutMs?: number;
  pollMs?: number;
  retainEndedMs?: number;
  branchMode?: BranchModeT | 'auto';
  /** QEMU's version as manifests record it (default: asked of the binary, once). */
  qemuVersion?: () => Promise<string>;
  whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void>;
  /** Network options (DNS upstream, namespace pool size); `false`: no networking at all. */
  network?: ConstructorParameters<typeof NetworkManager>[0] | false;
  /** Default resource limits of sandboxes (`forkd daemon --default-*`; docs/limits.md). */
  limitDefaults?: LimitDefaults;
  /** Confine QEMU (docs/security.md); default on unless FORKD_CONFINE=off. */
  confine?: boolean;
  /** Confined QEMU without its jail (benches compare the two; default: jailed where possible). */
  jail?: boolean;
  /** Start what this host cannot enforce, reported as unenforced (`--accept-unenforced`). */
  acceptUnenforced?: boolean;
  /** Pause sandboxes idle this many seconds (`forkd daemon --pause-idle-after`; docs/idle.md). */
  pauseIdleAfterS?: number;
  /** Hibernate sandboxes idle this many seconds (`--hibernate-idle-after`; docs/idle.md). */
  hibernateIdleAfterS?: number;
  /** TCG buffer cap and page merging of the QEMUs started (docs/idle.md "Leaner children"). */
  tuning?: Partial<VmTuning>;
  /** Pre-warmed pool of each created snapshot (`forkd daemon --default-pool`; docs/snapshots.md). */
  defaultPool?: number;
  /** All pools' VMs at most (`--pool-budget-vms/-mib`; default from the environment: pool-budget.ts). */
  poolBudget?: PoolBudgetLimits;
  /** Snapshots pods may fork, as typed (`forkd daemon --pod-snapshots`; pod-policy.ts). */
  podSnapshots?: string;
  /** Seconds a cache image may stay unused (`forkd daemon --image-cache-ttl`; images/expiry.ts). */
  imageCacheTtlS?: number;
}

export interface ServiceSet {
  sandboxes: SandboxManager;
  snapshots: SnapshotManager;
  branch: BranchManager;
  builds: BuildManager;
  host: Host;
  network?: NetworkManager;
  /** What the routes are given. */
  services: Services;
  /** Reconcile with the host: re-adopt sandboxes, clean up, repair, refill pools. */
  start(): Promise<ReconcileReport>;
  /** Daemon shutdown: pool VMs end, sandboxes keep running for the next daemon. */
  detach(): Promise<void>;
  /** Tests and benchmarks: pool VMs and every sandbox end. */
  close(): Promise<void>;
}

export function buildServices(opts: ServiceOptions): ServiceSet {
  const logOf = (component: string) => opts.log?.child?.({ component }) ?? opts.log;
  const { paths, store } = opts;
  wireVmm();
  // A daemon whose branches are all `copy` needs no process creation in QEMU.
  configureConfinement({
    ...(opts.confine === undefined ? {} : { enabled: opts.confine }),
    ...(opts.jail === undefined ? {} : { jail: opts.jail }),
    spawn: opts.branchMode !== 'copy',
  });
  if (opts.tuning) configureTuning(opts.tuning);
  const network =
    opts.network === false
      ? undefined
      : new NetworkManager({
          log: logOf('network'),
          onDenied: (sandbox, what) =>
            store.audit.record({
              at: new Date().toISOString(),
              principal: 'sandbox',
              method: 'EGRESS',
              route: what,
              target: sandbox,
              status: 403,
              code: 'egress_denied',
              duration_ms: 0,
            }),
          ...(opts.network || {}),
        });
  const limiter = new Limiter({
    home: paths.home,
    defaults: opts.limitDefaults,
    log: logOf('limits'),
  });
  const sandboxes = new SandboxManager({ ...opts, network, limiter, log: logOf('sandboxes') });
  const host = new Host(
    () => sandboxes.counts(),
    () => sandboxes.usage(),
    {
      doctor: () => doctorReport(paths),
      bench: () => benchResults(join(repoRoot(), 'bench', 'results')),
    },
  );
  const qemuVersion = opts.qemuVersion ?? (() => host.qemuVersion());
  const snapshots = new SnapshotManager({
    paths,
    store,
    sandboxes,
    qemuVersion,
    log: logOf('snapshots'),
    maxCreating: opts.maxCreating,
    network,
    limiter,
    defaultPool: opts.defaultPool,
    poolBudget: opts.poolBudget,
    podPolicy: PodPolicy.parse(opts.podSnapshots),
  });
  const boots = new BootStarts({
    paths,
    snapshots,
    qemuVersion,
    network,
    limiter,
    log: logOf('boot-snapshots') ?? silentLog,
    pool: Math.min(1, opts.defaultPool ?? defaultPoolFromEnv()),
    forkedFrom: (tag) => sandboxes.forkedFrom(tag),
  });
  sandboxes.useBootSnapshots((req, caller) => boots.start(req, caller));
  const refresh = new BootRefresh({
    paths,
    prepare: (image, size) => boots.prepare(image, size),
    log: logOf('boot-snapshots') ?? silentLog,
  });
  const branch = new BranchManager({
    paths,
    sandboxes,
    snapshots: publishingOf(snapshots),
    intents: store.intents,
    qemuVersion,
    log: logOf('branch'),
    branchMode: opts.branchMode,
    whileStopped: opts.whileStopped,
  });
  const contexts = new ContextManager({
    agentOf: (id) => sandboxes.agentOf(id),
    sandboxes,
    branch,
    execSlot: () => sandboxes.execSlot(),
  });
  const images = new ImageManager(paths, (image, size, say) => boots.prepare(image, size, say), {
    ttlS: opts.imageCacheTtlS,
    dropPools: async (tags) => {
      for (const tag of tags) await snapshots.pool.drop(tag);
    },
    warn: (msg) => logOf('images')?.warn({}, msg),
  });
  const packs = new PackManager({ paths, snapshots, qemuVersion });
  const builds = new BuildManager({ paths, sandboxes, snapshots, branch, images });
  snapshots.resolveReferencesWith(async (reference) => (await packs.ensure(reference)).tag);
  const services: Services = {
    contexts,
    sandboxes,
    snapshots,
    branch,
    images,
    audit: store.audit,
    host,
    ...(network ? { network: new SandboxNetworks(network, sandboxes) } : {}),
    packs,
    builds,
    events: new EventFeed(store.changes),
  };
  return {
    sandboxes,
    snapshots,
    branch,
    builds,
    host,
    network,
    services,
    start: async () => {
      await protectHome(paths.home, paths.sandboxes);
      if (vmTuning().merge !== 'off') await startMerging(opts.log);
      await network?.start();
      const recovered = await sandboxes.start();
      await snapshots.start();
      await branch.start();
      await images.start();
      await packs.start();
      await refresh.start();
      return recovered;
    },
    detach: async () => {
      images.close();
      await refresh.close();
      await snapshots.background; // a memory compaction under way finishes first
      await snapshots.pool.close(); // pool VMs are not sandboxes: they are not kept
      sandboxes.detach();
      await network?.detach();
      await limiter.close(); // only when no sandbox is left running in it
    },
    close: async () => {
      images.close();
      await refresh.close();
      await snapshots.background;
      await snapshots.pool.close();
      await sandboxes.killAll();
      await network?.close();
      await limiter.close();
    },
  };
}

/** A daemon that merges memory turns ksmd on (at the advised rate) if it is off. */
async function startMerging(log: ServiceOptions['log']): Promise<void> {
  const did = await enableKsm().catch((e: unknown) => `not started: ${String(e)}`);
  const warn = did === 'started' || did === 'already running' ? 'info' : 'warn';
  log?.[warn]({ ksm: did, merge: vmTuning().merge }, 'merging identical pages of sandboxes (KSM)');
}
