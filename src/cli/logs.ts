/**
 * `forkd logs ID`: a sandbox's VM console (kernel and agent messages); the daemon keeps it
 * for a stopped or dead sandbox too, until it forgets the sandbox.
 */
import type { Command } from 'commander';
import { Sandbox } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action } from './output.js';
import { parseSandboxId } from './parse.js';

export function register(cmd: Command): void {
  daemonOptions(cmd.argument('<id>', 'sandbox id')).action(
    action(async (id: string, flags: DaemonFlags) => {
      process.stdout.write(await Sandbox.logs(parseSandboxId(id), clientConfig(flags)));
    }),
  );
}
