/**
 * `forkd rmi TAG [--force]`: remove a snapshot through the daemon. The daemon refuses while
 * sandboxes forked from it run; `--force` kills them first.
 */
import type { Command } from 'commander';
import { Snapshot } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson } from './output.js';

interface RmiFlags extends DaemonFlags {
  force?: boolean;
}

export function register(program: Command): void {
  daemonOptions(
    program
      .command('rmi')
      .description('remove a snapshot')
      .argument('<tag>', 'snapshot tag')
      .option('--force', 'kill the sandboxes forked from it first')
      .option('--json', 'machine-readable output'),
  ).action(
    action(async (tag: string, flags: RmiFlags) => {
      await Snapshot.remove(tag, { ...clientConfig(flags), force: flags.force });
      if (flags.json) printJson({ removed: tag });
      else process.stdout.write(`removed snapshot ${tag}\n`);
    }),
  );
}
