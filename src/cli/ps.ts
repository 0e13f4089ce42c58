/**
 * `forkd ps`: the daemon's sandboxes (live ones, or all with --all) as a table — id, state,
 * tier (running, paused, hibernated), its idle policy, image, the snapshot it was forked from, memory, cpus,
 * times, labels — or `--json`. The snapshots' pool VMs are QEMUs too but not sandboxes:
 * a line on stderr counts them, and `--pool` lists them by snapshot instead.
 */
import type { Command } from 'commander';
import { Sandbox, Snapshot, type SandboxInfo, type SnapshotInfo } from '@forkd/sdk';
import { poolToWire, sandboxToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { formatIdle } from './idle-flags.js';
import { formatLimits } from './limits.js';
import { action, formatBytes, formatEnforced, printJson, printTable } from './output.js';
import { parseLabelFilter } from './parse.js';
import { formatPoolBudget } from './snapshots.js';

interface PsFlags extends DaemonFlags {
  all?: boolean;
  label?: string;
  pool?: boolean;
}

/** States a sandbox can still be used in; `ps` without --all shows only these. */
export const LIVE_STATES: readonly SandboxInfo['state'][] = ['starting', 'running'];

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .option('-a, --all', 'include stopped and dead sandboxes')
      .option('--label <k=v>', 'only sandboxes with this label')
      .option('--pool', "list the snapshots' pool VMs (pre-started for forks) instead")
      .option('--json', 'machine-readable output'),
  ).action(action(ps));
}

/** The daemon's sandboxes with `label` (all of them, or only the live ones). */
export async function listSandboxes(
  flags: DaemonFlags & { label?: string },
  all: boolean,
): Promise<SandboxInfo[]> {
  const label = parseLabelFilter(flags.label);
  const listed = await Sandbox.list({ ...clientConfig(flags), label });
  return all ? listed : listed.filter((s) => LIVE_STATES.includes(s.state));
}

async function ps(flags: PsFlags): Promise<void> {
  if (flags.pool) return pools(flags);
  const shown = await listSandboxes(flags, Boolean(flags.all));
  if (flags.json) return printJson(shown.map((s) => sandboxToWire(s)));
  if (shown.length === 0) process.stderr.write('no sandboxes: start one with `forkd create`\n');
  else printSandboxes(shown);
  const pooled = await pooledSnapshots(flags).catch(() => []); // a count only: never fail ps
  const total = pooled.reduce((n, s) => n + s.pool.ready, 0);
  if (total > 0) {
    const each = pooled.map((s) => `${s.tag} ${s.pool.ready}`).join(', ');
    process.stderr.write(
      `+ ${total} pool VM${total === 1 ? '' : 's'} waiting for forks (${each}), not sandboxes: \`forkd ps --pool\`\n`,
    );
  }
}

/** Snapshots with a pool (asked for, or VMs still waiting). */
async function pooledSnapshots(flags: DaemonFlags): Promise<SnapshotInfo[]> {
  const all = await Snapshot.list(clientConfig(flags));
  return all.filter((s) => s.pool.size > 0 || s.pool.ready > 0);
}

/** `ps --pool`: each snapshot's pool VMs, and how to remove them. */
async function pools(flags: PsFlags): Promise<void> {
  const pooled = await pooledSnapshots(flags);
  if (flags.json) return printJson(pooled.map((s) => ({ tag: s.tag, pool: poolToWire(s.pool) })));
  if (pooled.length === 0) {
    process.stderr.write('no pool VMs: `forkd snapshot pool TAG N` keeps N ready for forks\n');
    return;
  }
  printTable(
    ['SNAPSHOT', 'READY', 'SIZE', 'HELD', 'KIND', 'MEMORY'],
    pooled.map((s) => [
      s.tag,
      String(s.pool.ready),
      String(s.pool.size),
      String(s.pool.held),
      s.pool.prewarm ? 'pre-warmed' : 'waiting',
      s.pool.memoryBytes === null ? '-' : formatBytes(s.pool.memoryBytes),
    ]),
  );
  const budget = pooled.find((s) => s.pool.budget)?.pool.budget;
  if (budget) {
    process.stderr.write(
      `pool budget: ${formatPoolBudget(budget)}; the least recently forked snapshots' pools give way first (HELD)\n`,
    );
  }
  process.stderr.write('remove a pool with `forkd snapshot pool TAG 0`\n');
}

/** Its state, with why it ended, or what it runs without (a daemon that accepts that). */
function stateOf(s: SandboxInfo): string {
  if (s.reason) return `${s.state} (${s.reason})`;
  return s.unenforced?.length ? `${s.state} (${formatEnforced(s.unenforced)} enforced)` : s.state;
}

function printSandboxes(shown: SandboxInfo[]): void {
  printTable(
    [
      'ID',
      'STATE',
      'TIER',
      'IDLE',
      'IMAGE',
      'SNAPSHOT',
      'MEMORY',
      'CPUS',
      'LIMITS',
      'CREATED',
      'EXPIRES',
      'LABELS',
    ],
    shown.map((s) => [
      s.id,
      stateOf(s),
      s.state === 'running' ? (s.tier ?? 'running') : '-',
      formatIdle(s.idle),
      s.image ?? '-',
      s.snapshot ?? '-',
      `${s.memoryMib}M`,
      String(s.cpus),
      formatLimits(s.limits),
      shortTime(s.createdAt),
      s.expiresAt ? shortTime(s.expiresAt) : '-',
      Object.entries(s.labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(',') || '-',
    ]),
  );
}

/** `2025-01-02T03:04:05.678Z` → `2025-01-02 03:04:05`. */
function shortTime(iso: string): string {
  return iso.slice(0, 19).replace('T', ' ');
}
