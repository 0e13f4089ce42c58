/** `forkd ps`: the daemon's sandboxes (live ones, or all with --all), as a table or `--json`. */
import type { Command } from 'commander';
import { Sandbox, type SandboxInfo } from '@forkd/sdk';
import { SANDBOX, toWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson, printTable } from './output.js';

interface PsFlags extends DaemonFlags {
  all?: boolean;
  label?: string;
}

/** States a sandbox can still be used in; `ps` without --all shows only these. */
export const LIVE_STATES: readonly SandboxInfo['state'][] = ['starting', 'running'];

export function register(program: Command): void {
  daemonOptions(
    program
      .command('ps')
      .description('list sandboxes (running ones; --all for stopped and dead too)')
      .option('-a, --all', 'include stopped and dead sandboxes')
      .option('--label <k=v>', 'only sandboxes with this label')
      .option('--json', 'machine-readable output'),
  ).action(action(ps));
}

async function ps(flags: PsFlags): Promise<void> {
  const all = await Sandbox.list({ ...clientConfig(flags), label: flags.label });
  const shown = flags.all ? all : all.filter((s) => LIVE_STATES.includes(s.state));
  if (flags.json) return printJson(shown.map((s) => toWire(SANDBOX, s)));
  if (shown.length === 0) {
    process.stderr.write('no sandboxes: start one with `forkd create`\n');
    return;
  }
  printTable(
    ['ID', 'STATE', 'IMAGE', 'MEMORY', 'CPUS', 'CREATED', 'EXPIRES', 'LABELS'],
    shown.map((s) => [
      s.id,
      s.reason ? `${s.state} (${s.reason})` : s.state,
      s.image ?? s.snapshot ?? '-',
      `${s.memoryMib}M`,
      String(s.cpus),
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
