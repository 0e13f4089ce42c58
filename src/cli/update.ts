/**
 * `forkd update ID [--memory-limit S] [--cpu-limit C] [--pids-limit N] [--timeout S]
 * [--pause-idle-after S] [--hibernate-idle-after S] [--daemon-idle]`: change a running
 * sandbox (PATCH /v1/sandboxes/:id) in one request: new limits take effect at once, the
 * others keep their value; a timeout makes it expire that many seconds from now; idle times
 * change its idle policy at once (a time left out keeps its value; a paused sandbox stays
 * paused), and --daemon-idle drops its own policy for the daemon's defaults.
 * Prints `ID limits …` and `ID idle …` for what changed, or `--json` (the REST API's Sandbox).
 */
import type { Command } from 'commander';
import { Sandbox, type IdleOptions } from '@forkd/sdk';
import { sandboxToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { formatIdle, idleOptions, parseIdleFlags, type IdleFlags } from './idle-flags.js';
import { formatLimits, limitOptions, parseLimitFlags, type LimitFlags } from './limits.js';
import { action, printJson } from './output.js';
import { parseSandboxId, parseSandboxTimeout, usage } from './parse.js';

interface UpdateFlags extends DaemonFlags, LimitFlags, IdleFlags {
  timeout?: string;
  daemonIdle?: boolean;
  json?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    idleOptions(
      limitOptions(cmd.argument('<id>', 'sandbox id'), "the sandbox's"),
      "the sandbox's",
      'as it is now',
    )
      .option('--timeout <seconds>', 'kill the sandbox this many seconds from now')
      .option(
        '--daemon-idle',
        "drop the sandbox's own idle policy: it follows the daemon's defaults again",
      )
      .option('--json', 'machine-readable output'),
  ).action(action(update));
}

async function update(id: string, flags: UpdateFlags): Promise<void> {
  const limits = parseLimitFlags(flags);
  const idle = idleChange(flags);
  const timeoutS = parseSandboxTimeout(flags.timeout);
  if (!limits && idle === undefined && timeoutS === undefined) {
    throw usage(
      'nothing to change: give --memory-limit, --cpu-limit, --pids-limit, --timeout, --pause-idle-after, --hibernate-idle-after or --daemon-idle',
    );
  }
  const sandbox = await Sandbox.connect(parseSandboxId(id), clientConfig(flags));
  const info = await sandbox.update({
    limits,
    idle,
    timeoutMs: timeoutS === undefined ? undefined : timeoutS * 1000,
  });
  if (flags.json) return printJson(sandboxToWire(info));
  if (limits || idle === undefined) {
    process.stdout.write(`${info.id} limits ${formatLimits(info.limits)}\n`);
  }
  if (idle !== undefined) process.stdout.write(`${info.id} idle ${formatIdle(info.idle)}\n`);
}

/** The idle change asked for: new times, null for the daemon's defaults, or none. */
function idleChange(flags: UpdateFlags): IdleOptions | null | undefined {
  const idle = parseIdleFlags(flags);
  if (!flags.daemonIdle) return idle;
  if (idle) {
    throw usage(
      '--daemon-idle drops the idle times: give it without --pause-idle-after and --hibernate-idle-after',
      {
        flag: '--daemon-idle',
      },
    );
  }
  return null;
}
