/**
 * `forkd pause ID [--tier paused|hibernated|halted]` (`--hibernate` = `--tier hibernated`):
 * pause a sandbox (docs/idle.md). Paused, its QEMU is stopped and uses no CPU; hibernated, it
 * is on disk and holds no memory; halted, only its disk is kept (the wake boots it cold).
 * The next request wakes it.
 * Prints `ID TIER`, or `--json` (the REST API's Sandbox).
 */
import { Option, type Command } from 'commander';
import { Sandbox } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action } from './output.js';
import { parseSandboxId } from './parse.js';
import { printTier } from './resume.js';

type Tier = 'paused' | 'hibernated' | 'halted';

interface PauseFlags extends DaemonFlags {
  tier?: Tier;
  hibernate?: boolean;
  json?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<id>', 'sandbox id')
      .addOption(
        new Option(
          '--tier <tier>',
          'paused (VM stopped), hibernated (on disk, no memory) or halted (only the disk kept: the wake is a cold boot)',
        )
          .choices(['paused', 'hibernated', 'halted'])
          .conflicts('hibernate'),
      )
      .option('--hibernate', 'the same as --tier hibernated')
      .option('--json', 'machine-readable output'),
  ).action(action(pause));
}

async function pause(id: string, flags: PauseFlags): Promise<void> {
  const sandbox = await Sandbox.connect(parseSandboxId(id), clientConfig(flags));
  const tier = flags.tier ?? (flags.hibernate ? 'hibernated' : 'paused');
  const info = await sandbox.pause({ tier });
  printTier(info, flags.json);
}
