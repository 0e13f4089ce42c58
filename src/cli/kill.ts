/**
 * `forkd kill ID…|--all`: kill sandboxes through the daemon. Every id is tried even when
 * one fails; forkd then exits 1 and names the failures.
 */
import type { Command } from 'commander';
import { ForkdError, Sandbox, type ClientConfig } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson } from './output.js';
import { LIVE_STATES } from './ps.js';

interface KillFlags extends DaemonFlags {
  all?: boolean;
}

export function register(program: Command): void {
  daemonOptions(
    program
      .command('kill')
      .description('kill sandboxes')
      .argument('[ids...]', 'sandbox ids')
      .option('--all', 'kill every running sandbox')
      .option('--json', 'machine-readable output'),
  ).action(
    action(async (ids: string[], flags: KillFlags) => {
      const config = clientConfig(flags);
      const targets = await targetsOf(ids, Boolean(flags.all), config);
      const results = await Promise.allSettled(targets.map((id) => Sandbox.kill(id, config)));
      const killed = targets.filter((_, i) => results[i]?.status === 'fulfilled');
      const failed = targets.flatMap((id, i) => {
        const r = results[i];
        return r?.status === 'rejected'
          ? [{ id, error: asForkdError(r.reason).toJSON().error }]
          : [];
      });
      if (flags.json) printJson({ killed, failed });
      else report(killed, failed);
      return failed.length ? 1 : 0;
    }),
  );
}

async function targetsOf(ids: string[], all: boolean, config: ClientConfig): Promise<string[]> {
  if (all === ids.length > 0) {
    throw new ForkdError('bad_request', 'name the sandboxes to kill, or pass --all (not both)');
  }
  if (!all) return ids;
  const live = await Sandbox.list(config);
  return live.filter((s) => LIVE_STATES.includes(s.state)).map((s) => s.id);
}

function asForkdError(e: unknown): ForkdError {
  return e instanceof ForkdError ? e : new ForkdError('internal', String(e));
}

function report(
  killed: string[],
  failed: { id: string; error: { code: string; message: string } }[],
) {
  for (const id of killed) process.stdout.write(`${id}\n`);
  for (const f of failed)
    process.stderr.write(`forkd: ${f.id}: ${f.error.message} [${f.error.code}]\n`);
}
