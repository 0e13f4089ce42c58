/**
 * Prometheus metrics at GET /metrics, in a registry of this app's own (not prom-client's
 * global one, so two apps in one process — tests — never share or double-register).
 * Sandboxes by state and each snapshot's VMM pool are read from the services at scrape
 * time; boots, forks and execs count successful answers of the routes marked
 * `config.counts` (or as the handler set in `request.counted`: a fork of 10 counts 10);
 * every answer feeds the latency histogram (by route pattern, never by raw URL, to keep
 * label cardinality bounded) and, when it is an error, the per-code error counter.
 */
import type { FastifyRequest } from 'fastify';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import Type from 'typebox';
import type { HostInfo, Services, SnapshotService } from '../services/contracts.js';
import { SandboxState, type SnapshotT } from './schemas.js';
import type { Api, Counted } from './types.js';

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
  const gauge = (name: string, help: string, read: (s: SnapshotT) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['tag'],
      registers: [registry],
      async collect() {
        const all = await list();
        this.reset();
        for (const s of all) this.set({ tag: s.tag }, read(s));
      },
    });
  gauge('forkd_snapshot_pool_size', 'VMM pool size asked for, by snapshot', (s) => s.pool.size);
  gauge('forkd_snapshot_pool_ready', 'Pre-started VMMs waiting, by snapshot', (s) => s.pool.ready);
}

function counters(registry: Registry) {
  const registers = [registry];
  return {
    boots: new Counter({ name: 'forkd_boots_total', help: 'Sandboxes booted', registers }),
    forks: new Counter({
      name: 'forkd_forks_total',
      help: 'Sandboxes forked from snapshots',
      registers,
    }),
    execs: new Counter({ name: 'forkd_execs_total', help: 'Commands run', registers }),
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
  };
}

/** What a successful answer counts: the handler's say, else its route's `config.counts` once. */
function countedOf(request: FastifyRequest): Counted | null {
  const metric = request.routeOptions.config.counts;
  return request.counted ?? (metric ? { metric, n: 1 } : null);
}

/** Adds GET /metrics and the hooks that feed it. */
export function installMetrics(app: Api, services: Pick<Services, 'host' | 'snapshots'>): void {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  sandboxGauge(registry, services.host);
  poolGauges(registry, services.snapshots);
  const m = counters(registry);
  app.decorateRequest('counted', null);

  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    const status = reply.statusCode;
    m.latency.observe(
      { method: request.method, route, status: String(status) },
      reply.elapsedTime / 1000,
    );
    if (request.errorCode) m.errors.inc({ code: request.errorCode });
    const counted = countedOf(request);
    if (counted && status < 400 && counted.n > 0) m[counted.metric].inc(counted.n);
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
