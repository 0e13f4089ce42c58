/**
 * `forkd ps`: the daemon's sandboxes (live ones, or all with --all) as a table — id, state,
 * tier (running, paused, hibernated), its idle policy, image, the snapshot it was forked from, memory, cpus,
 * times, labels — or `--json`.
 */
import type { Command } from 'commander';
import { Sandbox, type SandboxInfo } from '@forkd/sdk';
import { sandboxToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { formatIdle } from './idle-flags.js';
import { formatLimits } from './limits.js';
import { action, printJson, printTable } from './output.js';
import { parseLabelFilter } from './parse.js';

interface PsFlags extends DaemonFlags {
  all?: boolean;
  label?: string;
}

/** States a sandbox can still be used in; `ps` without --all shows only these. */
export const LIVE_STATES: readonly SandboxInfo['state'][] = ['starting', 'running'];

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .option('-a, --all', 'include stopped and dead sandboxes')
      .option('--label <k=v>', 'only sandboxes with this label')
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
  const shown = await listSandboxes(flags, Boolean(flags.all));
  if (flags.json) return printJson(shown.map((s) => sandboxToWire(s)));
  if (shown.length === 0) {
    process.stderr.write('no sandboxes: start one with `forkd create`\n');
    return;
  }
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
      s.reason ? `${s.state} (${s.reason})` : s.state,
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
