/**
 * `forkd update ID [--memory-limit S] [--cpu-limit C] [--pids-limit N] [--timeout S]`:
 * change a running sandbox (PATCH /v1/sandboxes/:id): new limits take effect at once,
 * the others keep their value; a timeout makes it expire that many seconds from now.
 * Prints `ID limits …`, or `--json` (the REST API's Sandbox).
 */
import type { Command } from 'commander';
import { Sandbox } from '@forkd/sdk';
import { sandboxToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { formatLimits, limitOptions, parseLimitFlags, type LimitFlags } from './limits.js';
import { action, printJson } from './output.js';
import { parseSandboxId, parseSandboxTimeout, usage } from './parse.js';

interface UpdateFlags extends DaemonFlags, LimitFlags {
  timeout?: string;
  json?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    limitOptions(cmd.argument('<id>', 'sandbox id'), "the sandbox's")
      .option('--timeout <seconds>', 'kill the sandbox this many seconds from now')
      .option('--json', 'machine-readable output'),
  ).action(action(update));
}

async function update(id: string, flags: UpdateFlags): Promise<void> {
  const limits = parseLimitFlags(flags);
  const timeoutS = parseSandboxTimeout(flags.timeout);
  if (!limits && timeoutS === undefined) {
    throw usage('nothing to change: give --memory-limit, --cpu-limit, --pids-limit or --timeout');
  }
  const sandbox = await Sandbox.connect(parseSandboxId(id), clientConfig(flags));
  if (limits) await sandbox.setLimits(limits);
  if (timeoutS !== undefined) await sandbox.setTimeout(timeoutS * 1000);
  const info = sandbox.info;
  if (flags.json) return printJson(sandboxToWire(info));
  process.stdout.write(`${info.id} limits ${formatLimits(info.limits)}\n`);
}
