/**
 * `forkd pause ID [--hibernate]`: pause a sandbox (docs/idle.md). Paused, its QEMU is stopped
 * and uses no CPU; hibernated, it is on disk and holds no memory. The next request wakes it.
 * Prints `ID TIER`, or `--json` (the REST API's Sandbox).
 */
import type { Command } from 'commander';
import { Sandbox } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action } from './output.js';
import { parseSandboxId } from './parse.js';
import { printTier } from './resume.js';

interface PauseFlags extends DaemonFlags {
  hibernate?: boolean;
  json?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<id>', 'sandbox id')
      .option('--hibernate', 'write it to disk and end its VM (no memory), not only stop it')
      .option('--json', 'machine-readable output'),
  ).action(action(pause));
}

async function pause(id: string, flags: PauseFlags): Promise<void> {
  const sandbox = await Sandbox.connect(parseSandboxId(id), clientConfig(flags));
  const info = await sandbox.pause({ tier: flags.hibernate ? 'hibernated' : 'paused' });
  printTier(info, flags.json);
}
