/**
 * The idle-policy flags of `create`, `fork` and `update` (`--pause-idle-after`,
 * `--hibernate-idle-after`, the same words as the daemon's defaults) and how `ps` and `info`
 * show a sandbox's policy. The daemon checks that hibernation comes after the pause (with
 * its defaults filled in); the CLI only refuses what is not a number of seconds.
 */
import type { Command } from 'commander';
import type { IdleOptions, SandboxIdle } from '@forkd/sdk';
import { LIMITS } from '../contract/rules.js';
import { usage } from './parse.js';

export interface IdleFlags {
  pauseIdleAfter?: string;
  hibernateIdleAfter?: string;
}

/** Adds the two idle flags to a verb; `leftOut` says what a flag not given means. */
export function idleOptions(cmd: Command, whose: string, leftOut = "the daemon's"): Command {
  return cmd
    .option(
      '--pause-idle-after <s>',
      `pause ${whose} VM after this many seconds without a request; 0: never (default: ${leftOut})`,
    )
    .option(
      '--hibernate-idle-after <s>',
      `hibernate ${whose} VM after this many seconds without a request; 0: never (default: ${leftOut})`,
    );
}

function seconds(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  const { max } = LIMITS.idleAfterS;
  if (text.trim() === '' || !Number.isInteger(n) || n < 0 || n > max) {
    throw usage(`${flag} must be whole seconds from 0 (never) to ${max}, not "${text}"`, { flag });
  }
  return n;
}

/** The policy the flags ask for; undefined when neither was given (the daemon's defaults). */
export function parseIdleFlags(flags: IdleFlags): IdleOptions | undefined {
  const pause = seconds(flags.pauseIdleAfter, '--pause-idle-after');
  const hibernate = seconds(flags.hibernateIdleAfter, '--hibernate-idle-after');
  if (pause === undefined && hibernate === undefined) return undefined;
  const ms = (s: number | undefined) => (s === undefined ? undefined : s * 1000);
  return { pauseAfterMs: ms(pause), hibernateAfterMs: ms(hibernate) };
}

/** `pause 60s, hibernate 900s (daemon)`; `never` when it is never paused; `-` when unknown. */
export function formatIdle(idle: SandboxIdle | undefined): string {
  if (!idle) return '-';
  const part = (what: string, ms: number | null) => (ms === null ? [] : [`${what} ${ms / 1000}s`]);
  const parts = [...part('pause', idle.pauseAfterMs), ...part('hibernate', idle.hibernateAfterMs)];
  const policy = parts.length ? parts.join(', ') : 'never';
  return idle.source === 'daemon' ? `${policy} (daemon)` : policy;
}
