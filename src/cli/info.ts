/**
 * `forkd info ID`: one sandbox in full — state (and why it ended), what it came from, its
 * resources, its limits and, while it runs, what its QEMU uses (cpu time, throttling,
 * memory, OOM kills) and how it is confined — or `--json` (the REST API's Sandbox).
 */
import type { Command } from 'commander';
import { Sandbox, type SandboxInfo } from '@forkd/sdk';
import { sandboxToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { formatIdle } from './idle-flags.js';
import { formatLimits, formatUsage } from './limits.js';
import { action, formatEnforced, printJson } from './output.js';
import { formatMib, parseSandboxId } from './parse.js';

interface InfoFlags extends DaemonFlags {
  json?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd.argument('<id>', 'sandbox id').option('--json', 'machine-readable output'),
  ).action(action(info));
}

async function info(id: string, flags: InfoFlags): Promise<void> {
  const sandbox = await Sandbox.connect(parseSandboxId(id), clientConfig(flags));
  if (flags.json) return printJson(sandboxToWire(sandbox.info));
  process.stdout.write(lines(sandbox.info).join('\n') + '\n');
}

/**
 * `uid 1879…, seccomp (spawn allowed), no capabilities, mount and ipc namespace`, or `-`
 * when not running.
 */
function formatConfinement(c: SandboxInfo['confinement']): string {
  if (!c) return '-';
  const filter = c.seccomp ? `seccomp (spawn ${c.spawn ? 'allowed' : 'denied'})` : 'no seccomp';
  const caps = /^0+$/.test(c.capabilities) ? 'no capabilities' : `capabilities ${c.capabilities}`;
  const ns = c.namespaces?.length ? `${c.namespaces.join(' and ')} namespace` : 'no jail';
  return `uid ${c.uid}, ${filter}, ${caps}, ${ns}`;
}

/** `key: value` lines, aligned. */
function lines(s: SandboxInfo): string[] {
  const rows: [string, string][] = [
    ['id', s.id],
    ['state', s.reason ? `${s.state} (${s.reason})` : s.state],
    ['tier', s.tier ?? '-'],
    ['idle', formatIdle(s.idle)],
    ['image', s.image ?? '-'],
    ['snapshot', s.snapshot ?? '-'],
    ['parent', s.parent ?? '-'],
    ['memory', formatMib(s.memoryMib)],
    ['cpus', String(s.cpus)],
    ['limits', formatLimits(s.limits)],
    ['cgroup', s.limits?.cgroup ?? '-'],
    ['usage', s.usage ? formatUsage(s.usage) : '-'],
    ['pid', s.pid === null ? '-' : String(s.pid)],
    ['confined', formatConfinement(s.confinement)],
    ['enforced', formatEnforced(s.unenforced)],
    ['created', s.createdAt],
    ['expires', s.expiresAt ?? '-'],
    [
      'labels',
      Object.entries(s.labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(',') || '-',
    ],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`);
}
