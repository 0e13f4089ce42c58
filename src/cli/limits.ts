/**
 * The resource-limit flags of `create` and `fork` (`--memory-limit`, `--cpu-limit`,
 * `--pids-limit`) and how `ps` and `info` show a sandbox's limits and use. The daemon
 * checks the values against the host (guest RAM, host cores, units); the CLI only refuses
 * what is not a number, in the flag's own words.
 */
import type { Command } from 'commander';
import type { LimitsOptions, SandboxLimits, SandboxUsage } from '@forkd/sdk';
import { LIMIT_RANGES } from '../contract/rules.js';
import { formatBytes } from './output.js';
import { usage } from './parse.js';

export interface LimitFlags {
  memoryLimit?: string;
  cpuLimit?: string;
  pidsLimit?: string;
}

/** Adds the three limit flags to a verb. */
export function limitOptions(cmd: Command, whose: string): Command {
  return cmd
    .option(
      '--memory-limit <size>',
      `cap on ${whose} QEMU on the host (guest RAM + overhead), e.g. 768M; at least the guest RAM`,
    )
    .option('--cpu-limit <cores>', `CPU quota of ${whose} QEMU in cores, e.g. 0.5`)
    .option('--pids-limit <n>', `cap on ${whose} QEMU's threads (not the guest's processes)`);
}

function number(text: string, flag: string, what: string, integer = false): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
    throw usage(`${flag} must be ${what}, not "${text}"`, { flag });
  }
  return n;
}

/** The limits the flags ask for; undefined when none was given (inherit / defaults). */
export function parseLimitFlags(flags: LimitFlags): LimitsOptions | undefined {
  const out: LimitsOptions = {};
  if (flags.memoryLimit !== undefined) out.memory = flags.memoryLimit.trim();
  if (flags.cpuLimit !== undefined) {
    out.cpu = number(flags.cpuLimit, '--cpu-limit', 'a number of cores above 0, e.g. 0.5');
  }
  if (flags.pidsLimit !== undefined) {
    const { min, max } = LIMIT_RANGES.pids;
    const what = `a whole number from ${min} to ${max} (QEMU needs a few dozen threads)`;
    out.pids = number(flags.pidsLimit, '--pids-limit', what, true);
    if (out.pids < min || out.pids > max) {
      throw usage(`--pids-limit must be ${what}, not "${flags.pidsLimit}"`, {
        flag: '--pids-limit',
      });
    }
  }
  return Object.keys(out).length ? out : undefined;
}

/** `mem 512 MiB, cpu 0.5, pids 512` (`-` for none of a kind; `not enforced` when the host cannot). */
export function formatLimits(l: SandboxLimits | undefined): string {
  if (!l) return '-';
  const parts = [
    `mem ${l.memoryBytes === null ? '-' : formatBytes(l.memoryBytes)}`,
    `cpu ${l.cpu ?? '-'}`,
    `pids ${l.pids ?? '-'}`,
  ];
  return l.cgroup ? parts.join(', ') : `${parts.join(', ')} (not enforced)`;
}

/** `cpu 12.3 s (throttled 4.0 s), mem 300 MiB, 1 OOM kill`. */
export function formatUsage(u: SandboxUsage): string {
  const oom = u.oomKills ? `, ${u.oomKills} OOM kill${u.oomKills === 1 ? '' : 's'}` : '';
  return `cpu ${u.cpuSeconds.toFixed(1)} s (throttled ${u.throttledSeconds.toFixed(1)} s), mem ${formatBytes(u.memoryBytes)}${oom}`;
}
