/**
 * The network flags `create`, `fork`, `snapshot create` and `network` share: `--network`,
 * `--egress none`, `--allow-out` / `--deny-out` (repeatable) and `--no-internet`, turned
 * into the SDK's options. Entries are checked by the daemon, which names a bad one.
 */
import type { Command } from 'commander';
import type { EgressPolicy, NetworkMode } from '@forkd/sdk';
import { collect, usage } from './parse.js';

export interface NetworkFlags {
  network?: string;
  egress?: string;
  allowOut: string[];
  denyOut: string[];
  internet?: boolean;
}

/** Add the egress flags (and `--network` unless `withMode` is false). */
export function networkOptions(cmd: Command, withMode = true): Command {
  if (withMode) cmd.option('--network <mode>', 'nat (default: a NIC with NAT) or none (no NIC)');
  return cmd
    .option('--egress <none>', 'none: nothing goes out, DNS included')
    .option(
      '--allow-out <entry>',
      'CIDR, IP, host or *.domain, with optional :port (repeatable)',
      collect,
      [],
    )
    .option('--deny-out <entry>', 'like --allow-out; wins over it (repeatable)', collect, [])
    .option('--no-internet', 'only what --allow-out names goes out');
}

export function parseNetworkMode(text: string | undefined): NetworkMode | undefined {
  if (text === undefined || text === 'nat' || text === 'none') return text;
  throw usage(`--network must be nat or none, not "${text}"`, { flag: '--network' });
}

/** The policy the flags state (undefined when they state none). */
export function parseEgress(flags: NetworkFlags): EgressPolicy | undefined {
  if (flags.egress !== undefined) {
    if (flags.egress !== 'none')
      throw usage(`--egress takes only "none", not "${flags.egress}"`, { flag: '--egress' });
    if (flags.allowOut.length || flags.denyOut.length || flags.internet === false) {
      throw usage('--egress none takes no --allow-out, --deny-out or --no-internet', {
        flag: '--egress',
      });
    }
    return 'none';
  }
  const policy = {
    ...(flags.internet === false ? { allowInternet: false } : {}),
    ...(flags.allowOut.length ? { allowOut: flags.allowOut } : {}),
    ...(flags.denyOut.length ? { denyOut: flags.denyOut } : {}),
  };
  return Object.keys(policy).length ? policy : undefined;
}
