/**
 * `forkd kill ID…|--all|--label K=V`: kill sandboxes through the daemon. Every id is tried
 * even when one fails; forkd then names the failures and exits with their exit code when
 * they agree (3 when every failure was an unknown id), else 1.
 */
import type { Command } from 'commander';
import { Sandbox } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { EXIT, exitForAll } from './exit.js';
import { action, printJson } from './output.js';
import { parseSandboxId, usage } from './parse.js';
import { listSandboxes } from './ps.js';
import { asForkdError } from './report.js';

interface KillFlags extends DaemonFlags {
  all?: boolean;
  label?: string;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('[ids...]', 'sandbox ids')
      .option('--all', 'kill every running sandbox')
      .option('--label <k=v>', 'kill every running sandbox with this label')
      .option('--json', 'machine-readable output'),
  ).action(action(kill));
}

async function kill(ids: string[], flags: KillFlags): Promise<number> {
  const config = clientConfig(flags);
  const targets = await targetsOf(ids, flags);
  const results = await Promise.allSettled(targets.map((id) => Sandbox.kill(id, config)));
  const killed = targets.filter((_, i) => results[i]?.status === 'fulfilled');
  const failed = targets.flatMap((id, i) => {
    const r = results[i];
    return r?.status === 'rejected' ? [{ id, error: asForkdError(r.reason) }] : [];
  });
  if (flags.json) {
    printJson({ killed, failed: failed.map((f) => ({ id: f.id, error: f.error.toJSON().error })) });
  } else {
    for (const id of killed) process.stdout.write(`${id}\n`);
    for (const f of failed) {
      process.stderr.write(`forkd: ${f.id}: ${f.error.message} [${f.error.code}]\n`);
    }
  }
  return failed.length ? exitForAll(failed.map((f) => f.error.code)) : EXIT.ok;
}

/** The ids named, or the live sandboxes `--all` or `--label` select (exactly one of those). */
async function targetsOf(ids: string[], flags: KillFlags): Promise<string[]> {
  const ways = [ids.length > 0, Boolean(flags.all), flags.label !== undefined];
  if (ways.filter(Boolean).length !== 1) {
    throw usage('name the sandboxes to kill, or pass --all or --label K=V (one of these)');
  }
  if (ids.length) return ids.map(parseSandboxId);
  return (await listSandboxes(flags, false)).map((s) => s.id);
}
