/**
 * `getMetrics()`: E2B's `GET /sandboxes/:id/metrics` from what forkd measures of a sandbox
 * (its QEMU's cgroup). forkd keeps no history of samples, so the answer is one sample taken
 * when asked, returned when the asked range (`start`/`end`, Unix seconds) holds that moment:
 * CPU use is the average since the sandbox started, memory what its QEMU holds on the host
 * (guest RAM it touched plus QEMU's own), the disk unknown (0).
 */
import type { SandboxT } from '../../contract/schemas.js';

/** E2B aligns samples to 5 s buckets and its ranges to seconds: a sample this close is in. */
const SLACK_MS = 10_000;
const MIB = 1024 * 1024;

export interface E2bMetric {
  timestamp: string;
  cpuUsedPct: number;
  cpuCount: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

/** A query's Unix-seconds bound as ms (absent or not a number: unbounded). */
function bound(raw: unknown): number | undefined {
  const n = typeof raw === 'string' && raw !== '' ? Number(raw) : raw;
  return typeof n === 'number' && Number.isFinite(n) ? n * 1000 : undefined;
}

/** The samples of `s` within the query's range: the one taken now, or none. */
export function metricsOf(
  s: SandboxT,
  query: Record<string, unknown>,
  now = Date.now(),
): E2bMetric[] {
  const start = bound(query.start);
  const end = bound(query.end);
  if (start !== undefined && now < start - SLACK_MS) return [];
  if (end !== undefined && now > end + SLACK_MS) return [];
  const lifeS = Math.max(1, (now - Date.parse(s.created_at)) / 1000);
  const cpuSeconds = s.usage?.cpu_seconds ?? 0;
  const cpuUsedPct = Math.min(100, (100 * cpuSeconds) / (lifeS * Math.max(1, s.cpus)));
  return [
    {
      timestamp: new Date(now).toISOString(),
      cpuUsedPct: Math.round(cpuUsedPct * 100) / 100,
      cpuCount: s.cpus,
      memUsed: s.usage?.memory_bytes ?? 0,
      memTotal: s.memory_mib * MIB,
      memCache: 0,
      diskUsed: 0,
      diskTotal: 0,
    },
  ];
}
