/**
 * `forkd resume ID`: wake a paused sandbox now (any request would too; docs/idle.md).
 * Prints `ID TIER`, or `--json` (the REST API's Sandbox).
 */
import type { Command } from 'commander';
import { Sandbox, type SandboxInfo } from '@forkd/sdk';
import { sandboxToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson } from './output.js';
import { parseSandboxId } from './parse.js';

interface ResumeFlags extends DaemonFlags {
  json?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd.argument('<id>', 'sandbox id').option('--json', 'machine-readable output'),
  ).action(action(resume));
}

async function resume(id: string, flags: ResumeFlags): Promise<void> {
  const sandbox = await Sandbox.connect(parseSandboxId(id), clientConfig(flags));
  printTier(await sandbox.resume(), flags.json);
}

/** What `pause` and `resume` print: `ID TIER`, or the Sandbox as JSON. */
export function printTier(info: SandboxInfo, json?: boolean): void {
  if (json) return printJson(sandboxToWire(info));
  process.stdout.write(`${info.id} ${info.tier ?? 'running'}\n`);
}
