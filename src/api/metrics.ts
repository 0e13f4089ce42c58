/**
 * Prometheus metrics at GET /metrics, in a registry of this app's own (not prom-client's
 * global one, so two apps in one process — tests — never share or double-register).
 * Sandboxes by state and each snapshot's VMM pool are read from the services at scrape
 * time; boots, forks, execs and branches count successful answers of the routes marked
 * `config.counts` (or as the handler set in `request.counted`: a fork of 10 counts 10);
 * a branch's pause (`request.pauseMs`) feeds its own histogram;
 * every answer feeds the latency histogram (by route pattern, never by raw URL, to keep
 * label cardinality bounded) and, when it is an error, the per-code error counter.
 * Each running sandbox's CPU and memory use and limits (its cgroup's numbers) are labelled
 * by sandbox id: bounded by the sandboxes running, and gone once a sandbox ends. The node
 * cache's hits, misses and bytes fetched are read from the pack service at scrape time.
 */
import type { FastifyRequest } from 'fastify';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import Type from 'typebox';
import type {
  HostInfo,
  NetworkService,
  PackService,
  SandboxUsageT,
  Services,
  SnapshotService,
} from '../services/contracts.js';
import {
  SandboxState,
  type CacheInfoT,
  type PoolBudgetStateT,
  type SnapshotT,
} from '../contract/schemas.js';
import type { Api, CountedMetric } from './types.js';

const STATES = SandboxState.anyOf.map((s) => s.const);

function sandboxGauge(registry: Registry, host: HostInfo): Gauge<'state'> {
  return new Gauge({
    name: 'forkd_sandboxes',
    help: 'Sandboxes by state',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const counts = host.sandboxCounts();
      for (const state of new Set([...STATES, ...Object.keys(counts)])) {
        this.set({ state }, counts[state] ?? 0);
      }
    },
  });
}

/** Egress denials per running sandbox (bounded by the sandboxes running; gone ones drop). */
function deniedGauge(registry: Registry, network: NetworkService): void {
  new Gauge({
    name: 'forkd_sandbox_egress_denied',
    help: 'Connections and DNS queries a running sandbox was refused, by sandbox',
    labelNames: ['sandbox'],
    registers: [registry],
    async collect() {
      const counts = await network.deniedCounts().catch(() => ({}));
      this.reset();
      for (const [sandbox, n] of Object.entries(counts)) this.set({ sandbox }, n);
    },
  });
}

/**
 * Refusals per running sandbox by reason: what the name proxy could not read or would not
 * pass (ech, h2c, hello, name_address, name_denied…), DNS names refused, UDP on an
 * inspected port (quic) and the rest of the filter's (filter).
 */
function refusedGauge(registry: Registry, network: NetworkService): void {
  new Gauge({
    name: 'forkd_sandbox_egress_refused',
    help: 'Connections and DNS queries a running sandbox was refused, by sandbox and reason',
    labelNames: ['sandbox', 'reason'],
    registers: [registry],
    async collect() {
      const counts = await network.refusedCounts().catch(() => ({}));
      this.reset();
      for (const [sandbox, reasons] of Object.entries(counts)) {
        for (const [reason, n] of Object.entries(reasons)) this.set({ sandbox, reason }, n);
      }
    },
  });
}

/** `fn` shared by the callers of one scrape (prom-client collects every metric at once). */
function oncePerScrape<T>(fn: () => Promise<T>): () => Promise<T> {
  let pending: Promise<T> | undefined;
  return () => (pending ??= fn().finally(() => (pending = undefined)));
}

/**
 * Each snapshot's pool of pre-started VMMs: the size asked for and how many wait ready,
 * from one listing per scrape. Labelled by tag (bounded by the snapshots on the host); a
 * snapshot removed since the last scrape disappears. A failing listing empties the gauges
 * rather than failing the scrape.
 */
function poolGauges(registry: Registry, snapshots: SnapshotService): void {
  const list = oncePerScrape(() => snapshots.list().catch(() => []));
  const gauge = (name: string, help: string, read: (s: SnapshotT) => number | null) =>
    new Gauge({
      name,
      help,
      labelNames: ['tag'],
      registers: [registry],
      async collect() {
        const all = await list();
        this.reset();
        for (const s of all) {
          const value = read(s);
          if (value !== null) this.set({ tag: s.tag }, value);
        }
      },
    });
  gauge('forkd_snapshot_pool_size', 'VMM pool size asked for, by snapshot', (s) => s.pool.size);
  gauge('forkd_snapshot_pool_ready', 'Pre-started VMMs waiting, by snapshot', (s) => s.pool.ready);
  // Pool VMs are not sandboxes: without this their memory shows in no sandbox's usage.
  gauge(
    'forkd_snapshot_pool_memory_bytes',
    'Host memory of the waiting pool VMs, by snapshot (absent where not measured)',
    (s) => (s.pool.ready > 0 ? s.pool.memory_bytes : null),
  );
  gauge(
    'forkd_snapshot_pool_held',
    "Pool VMs the host's pool budget holds back, by snapshot",
    (s) => s.pool.held ?? 0,
  );
  budgetGauges(registry, snapshots);
}

/** The host-wide pool budget and what all pools take of it (one value each, no labels). */
function budgetGauges(registry: Registry, snapshots: SnapshotService): void {
  const gauge = (name: string, help: string, read: (b: PoolBudgetStateT) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(read(snapshots.poolBudget()));
      },
    });
  gauge('forkd_pool_budget_vms', 'Pool VMs allowed, all snapshots together', (b) => b.vms);
  gauge(
    'forkd_pool_budget_memory_bytes',
    'Host memory allowed to pool VMs, all snapshots together',
    (b) => b.memory_bytes,
  );
  gauge('forkd_pool_vms', 'Pool VMs waiting or starting, all snapshots', (b) => b.used_vms);
  gauge(
    'forkd_pool_memory_bytes',
    'Host memory the waiting pool VMs took when ready (where measured), all snapshots',
    (b) => b.used_memory_bytes,
  );
}

/** Per running sandbox: CPU and memory use and limits, from one usage read per scrape. */
function usageGauges(registry: Registry, host: HostInfo): void {
  const usage = oncePerScrape(() => host.sandboxUsage().catch(() => []));
  const gauge = (name: string, help: string, read: (u: SandboxUsageT) => number | null) =>
    new Gauge({
      name,
      help,
      labelNames: ['sandbox'],
      registers: [registry],
      async collect() {
        const all = await usage();
        this.reset();
        for (const u of all) {
          const v = read(u);
          if (v !== null) this.set({ sandbox: u.id }, v);
        }
      },
    });
  gauge('forkd_sandbox_cpu_seconds', 'CPU time used by a sandbox QEMU', (u) => u.cpu_seconds);
  gauge(
    'forkd_sandbox_cpu_throttled_seconds',
    'CPU time held back by a sandbox CPU quota',
    (u) => u.throttled_seconds,
  );
  gauge('forkd_sandbox_memory_bytes', 'Memory charged to a sandbox cgroup', (u) => u.memory_bytes);
  gauge('forkd_sandbox_oom_kills', 'Host OOM kills at a sandbox memory limit', (u) => u.oom_kills);
  gauge(
    'forkd_sandbox_memory_limit_bytes',
    'Memory limit of a sandbox QEMU',
    (u) => u.limits?.memory_bytes ?? null,
  );
  gauge('forkd_sandbox_cpu_limit_cores', 'CPU quota of a sandbox', (u) => u.limits?.cpu ?? null);
}

/** The node cache (docs/packs.md): chunk hits and misses, bytes fetched, bytes held. */
function cacheGauges(registry: Registry, packs: PackService): void {
  const info = oncePerScrape(() => packs.cacheInfo());
  const gauge = (name: string, help: string, read: (c: CacheInfoT) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        this.set(read(await info()));
      },
    });
  gauge(
    'forkd_cache_chunk_hits',
    'Chunks a pull found in the node cache (since start)',
    (c) => c.hits,
  );
  gauge(
    'forkd_cache_chunk_misses',
    'Chunks a pull fetched from a registry (since start)',
    (c) => c.misses,
  );
  gauge(
    'forkd_cache_fetched_bytes',
    'Bytes of chunks fetched from registries (since start)',
    (c) => c.bytes_fetched,
  );
  gauge('forkd_cache_bytes', 'Bytes the node cache holds', (c) => c.bytes);
}

function counters(registry: Registry) {
  const registers = [registry];
  const counter = (name: string, help: string) => new Counter({ name, help, registers });
  const counts: Record<CountedMetric, Counter> = {
    boots: counter('forkd_boots_total', 'Sandboxes booted'),
    forks: counter('forkd_forks_total', 'Sandboxes forked from snapshots'),
    execs: counter('forkd_execs_total', 'Commands run'),
    branches: counter('forkd_branches_total', 'Running sandboxes branched into snapshots'),
  };
  return {
    counts,
    errors: new Counter({
      name: 'forkd_errors_total',
      help: 'Error answers by catalog code',
      labelNames: ['code'],
      registers,
    }),
    latency: new Histogram({
      name: 'forkd_http_request_duration_seconds',
      help: 'HTTP request duration by route pattern',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120],
      registers,
    }),
    // Fine buckets around the 60 ms a branch's pause should stay under.
    branchPause: new Histogram({
      name: 'forkd_branch_pause_seconds',
      help: 'How long the source of a branch was stopped (stop to cont)',
      buckets: [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 1, 2.5],
      registers,
    }),
  };
}

/** What a successful answer counts: the handler's say, else its route's `config.counts` once. */
function countedOf(request: FastifyRequest): [CountedMetric, number][] {
  const metric = request.routeOptions.config.counts;
  const counted = request.counted ?? (metric ? { [metric]: 1 } : {});
  return Object.entries(counted) as [CountedMetric, number][];
}

/** Adds GET /metrics and the hooks that feed it. */
export function installMetrics(
  app: Api,
  services: Pick<Services, 'host' | 'snapshots' | 'network' | 'packs'>,
): void {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  sandboxGauge(registry, services.host);
  poolGauges(registry, services.snapshots);
  if (services.network) {
    deniedGauge(registry, services.network);
    refusedGauge(registry, services.network);
  }
  if (services.packs) cacheGauges(registry, services.packs);
  usageGauges(registry, services.host);
  const m = counters(registry);
  app.decorateRequest('counted', null);
  app.decorateRequest('pauseMs', null);

  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    const status = reply.statusCode;
    m.latency.observe(
      { method: request.method, route, status: String(status) },
      reply.elapsedTime / 1000,
    );
    if (request.errorCode) m.errors.inc({ code: request.errorCode });
    if (status >= 400) return;
    for (const [metric, n] of countedOf(request)) if (n > 0) m.counts[metric].inc(n);
    if (request.pauseMs !== null) m.branchPause.observe(request.pauseMs / 1000);
  });
  app.addHook('onClose', async () => registry.clear());

  app.get(
    '/metrics',
    {
      schema: {
        summary: 'Prometheus metrics',
        tags: ['host'],
        response: {
          200: {
            description: 'Prometheus text exposition format',
            content: { 'text/plain': { schema: Type.String() } },
          },
        },
      },
    },
    async (_request, reply) => reply.type(registry.contentType).send(await registry.metrics()),
  );
}
