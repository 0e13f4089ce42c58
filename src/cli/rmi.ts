/**
 * `forkd rmi TAG [--force] [--cascade]`: remove a snapshot through the daemon. The daemon
 * refuses while sandboxes forked from it run (`--force` kills them first) and while other
 * snapshots are built on it, naming them (`--cascade` removes that whole subtree), so a
 * chain is never left with a missing layer.
 */
import type { Command } from 'commander';
import { Snapshot } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson } from './output.js';
import { parseName } from './parse.js';

interface RmiFlags extends DaemonFlags {
  force?: boolean;
  cascade?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<tag>', 'snapshot tag')
      .option(
        '--force',
        'kill the sandboxes running from it (with --cascade: from its subtree) first',
      )
      .option('--cascade', 'also remove every snapshot built on it')
      .option('--json', 'machine-readable output'),
  ).action(
    action(async (tag: string, flags: RmiFlags) => {
      const { force, cascade } = flags;
      await Snapshot.remove(parseName(tag, 'the tag'), { ...clientConfig(flags), force, cascade });
      if (flags.json) printJson({ removed: tag });
      else process.stdout.write(`removed snapshot ${tag}${cascade ? ' and its subtree' : ''}\n`);
    }),
  );
}
