/** `forkd logs ID`: a sandbox's VM console (kernel and agent messages). */
import type { Command } from 'commander';
import { Sandbox } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action } from './output.js';

export function register(program: Command): void {
  daemonOptions(
    program
      .command('logs')
      .description("print a sandbox's console log")
      .argument('<id>', 'sandbox id'),
  ).action(
    action(async (id: string, flags: DaemonFlags) => {
      process.stdout.write(await Sandbox.logs(id, clientConfig(flags)));
    }),
  );
}
