/**
 * `forkd fork TAG|REF -n N`: N sandboxes forked from a snapshot through the daemon, each
 * already warm; a snapshot named by OCI reference is pulled on its first fork (docs/packs.md). Prints the children's ids, one per line. Children that fail are named on stderr
 * and forkd exits 1, leaving the healthy ones running unless `--all-or-nothing` asked the
 * daemon to kill them too.
 */
import type { Command } from 'commander';
import { Snapshot, type ForkResult } from '@forkd/sdk';
import { sandboxToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { idleOptions, parseIdleFlags, type IdleFlags } from './idle-flags.js';
import { limitOptions, parseLimitFlags, type LimitFlags } from './limits.js';
import { action, printJson } from './output.js';
import { networkOptions, parseEgress, type NetworkFlags } from './network-flags.js';
import {
  collect,
  parseCount,
  parseEnv,
  parseLabels,
  parseName,
  parseSandboxTimeout,
  typed,
} from './parse.js';
import { LIMITS } from './rules.js';

interface ForkFlags extends DaemonFlags, NetworkFlags, LimitFlags, IdleFlags {
  count: string;
  label: string[];
  env: string[];
  timeout?: string;
  allOrNothing?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    idleOptions(limitOptions(networkOptions(cmd, false), "each child's"), "each child's")
      .argument(
        '<snapshot>',
        'snapshot tag, or an OCI reference REGISTRY/REPO[:TAG] (pulled on first fork)',
      )
      .option('-n, --count <n>', 'how many sandboxes (1-100)', '1')
      .option('--label <k=v>', 'label of every child (repeatable)', collect, [])
      .option('-e, --env <K=V>', 'environment variable for every command (repeatable)', collect, [])
      .option('--timeout <seconds>', 'kill each child after this many seconds')
      .option('--all-or-nothing', 'if any child fails, kill the healthy ones too')
      .option('--json', 'machine-readable output'),
  ).action(action(fork));
}

async function fork(tag: string, flags: ForkFlags): Promise<number> {
  const n = parseCount(flags.count, typed('-n', '--count'), LIMITS.forkCount);
  const timeoutS = parseSandboxTimeout(flags.timeout);
  const limits = parseLimitFlags(flags);
  const idle = parseIdleFlags(flags);
  const config = clientConfig(flags);
  // A reference (REGISTRY/REPO:TAG) the daemon pulls on this first fork; a tag is checked here.
  const snapshot = tag.includes('/') ? tag : parseName(tag, 'the tag');
  const result = await Snapshot.fork(snapshot, {
    ...config,
    n,
    labels: parseLabels(flags.label),
    envs: parseEnv(flags.env),
    timeoutMs: timeoutS === undefined ? undefined : timeoutS * 1000,
    allOrNothing: flags.allOrNothing,
    egress: parseEgress(flags),
    limits,
    idle,
  });
  if (flags.json) printJson(forkJson(result));
  else report(result, flags.allOrNothing);
  return result.failed.length ? 1 : 0;
}

/** The ForkResult in the REST API's shape. */
function forkJson({ sandboxes, failed }: ForkResult) {
  return {
    sandboxes: sandboxes.map((s) => sandboxToWire(s.info)),
    failed: failed.map(({ index, error }) => ({ index, error: error.toJSON().error })),
  };
}

function report({ sandboxes, failed }: ForkResult, allOrNothing?: boolean): void {
  for (const s of sandboxes) process.stdout.write(`${s.id}\n`);
  for (const { index, error } of failed) {
    process.stderr.write(`forkd: child ${index}: ${error.message} [${error.code}]\n`);
  }
  if (failed.length && allOrNothing) {
    process.stderr.write('forkd: --all-or-nothing: the healthy children were killed too\n');
  }
}
