/**
 * `forkd cache ls|size|prune [--all]`: the node cache (docs/packs.md "Node cache"): chunks
 * fetched from registries and snapshots pulled by reference, least recently used first,
 * its size against its limit, and eviction (down to the limit, or everything no sandbox or
 * snapshot needs). `--json` prints the API's answer.
 */
import type { Command } from 'commander';
import { Forkd, type CacheEntry } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, formatBytes, printJson } from './output.js';
import { snake } from './pack.js';

interface CacheFlags extends DaemonFlags {
  json?: boolean;
  all?: boolean;
}

export function register(cmd: Command): void {
  const json = (c: Command) => c.option('--json', 'machine-readable output');
  daemonOptions(
    json(cmd.command('ls').description('chunks and snapshots, least recently used first')),
  ).action(action(ls));
  daemonOptions(
    json(cmd.command('size').description('bytes held, the limit, hits and misses')),
  ).action(action(size));
  daemonOptions(
    json(
      cmd
        .command('prune')
        .description('evict down to the limit (--all: everything no sandbox or snapshot needs)')
        .option('--all', 'evict everything not in use'),
    ),
  ).action(action(prune));
}

const packs = (flags: CacheFlags) => new Forkd(clientConfig(flags)).packs;

function line(e: CacheEntry): string {
  const what = e.kind === 'snapshot' ? `${e.tag} ${e.reference ?? ''}` : e.digest.slice(0, 19);
  return `${e.kind.padEnd(8)} ${formatBytes(e.bytes).padStart(10)}  ${e.usedAt}  ${what}`;
}

async function ls(flags: CacheFlags): Promise<void> {
  const info = await packs(flags).cache();
  if (flags.json) return printJson(info.entries.map(snake));
  for (const e of info.entries) process.stdout.write(`${line(e)}\n`);
}

async function size(flags: CacheFlags): Promise<void> {
  const info = await packs(flags).cache();
  if (flags.json) return printJson(snake({ ...info, entries: info.entries.length }));
  const limit = info.limitBytes === null ? 'no limit' : `limit ${formatBytes(info.limitBytes)}`;
  process.stdout.write(
    `${formatBytes(info.bytes)} in ${info.entries.length} entries (${limit}); ${info.hits} hits, ${info.misses} misses, ${formatBytes(info.bytesFetched)} fetched\n`,
  );
}

async function prune(flags: CacheFlags): Promise<void> {
  const r = await packs(flags).pruneCache({ all: flags.all });
  if (flags.json) return printJson({ ...r, removed: r.removed.map(snake) });
  for (const e of r.removed) process.stdout.write(`removed ${line(e)}\n`);
  process.stdout.write(`${formatBytes(r.bytes)} left\n`);
}
