/** `forkd logout REGISTRY`: the daemon forgets the credentials `forkd login` gave it. */
import type { Command } from 'commander';
import { Forkd } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action } from './output.js';

export function register(cmd: Command): void {
  daemonOptions(cmd.argument('<registry>', 'registry host[:port]')).action(
    action(async (registry: string, flags: DaemonFlags) => {
      await new Forkd(clientConfig(flags)).images.logout(registry);
      process.stdout.write(`logged out of ${registry}\n`);
    }),
  );
}
