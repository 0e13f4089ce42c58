/**
 * Prometheus metrics at GET /metrics, in a registry of this app's own (not prom-client's
 * global one, so two apps in one process — tests — never share or double-register).
 * Sandboxes by state are read from the host service at scrape time; boots and execs count
 * successful answers of the routes marked `config.counts`; every answer feeds the latency
 * histogram (by route pattern, never by raw URL, to keep label cardinality bounded) and,
 * when it is an error, the per-code error counter.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import Type from 'typebox';
import type { HostInfo } from '../services/contracts.js';
import { SandboxState } from './schemas.js';
import type { Api } from './types.js';

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

function counters(registry: Registry) {
  const registers = [registry];
  return {
    boots: new Counter({ name: 'forkd_boots_total', help: 'Sandboxes booted', registers }),
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

/** Adds GET /metrics and the hooks that feed it. */
export function installMetrics(app: Api, host: HostInfo): void {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  sandboxGauge(registry, host);
  const m = counters(registry);

  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    const status = reply.statusCode;
    m.latency.observe(
      { method: request.method, route, status: String(status) },
      reply.elapsedTime / 1000,
    );
    if (request.errorCode) m.errors.inc({ code: request.errorCode });
    const counted = request.routeOptions.config.counts;
    if (counted && status < 400) m[counted].inc();
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
