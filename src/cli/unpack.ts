/**
 * `forkd unpack FILE [--tag NEW] [--force]`: verify a snapshot pack in full, then install
 * its chain and image (docs/packs.md); prints the installed tag.
 */
import { resolve } from 'node:path';
import type { Command } from 'commander';
import type { InstallInfo } from '@forkd/sdk';
import { daemonOptions } from './client.js';
import { action } from './output.js';
import { parseName } from './parse.js';
import { packClient, show, type PackFlags } from './pack.js';

export interface InstallFlags extends PackFlags {
  tag?: string;
  force?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    installFlags(cmd.argument('<file>', 'a .forkd.tar.zst pack on the daemon host')),
  ).action(action(unpack));
}

/** --tag, --force and --json (also `forkd pull`). */
export function installFlags(cmd: Command): Command {
  return cmd
    .option('--tag <tag>', 'install the snapshot under this tag (its parents keep theirs)')
    .option('--force', 'replace a snapshot of that tag')
    .option('--json', 'machine-readable output, no progress');
}

export function installOptions(flags: InstallFlags) {
  return {
    tag: flags.tag === undefined ? undefined : parseName(flags.tag, '--tag'),
    force: flags.force,
  };
}

/** The tag on stdout; what was reused and resumed on stderr. */
export function showInstalled(r: InstallInfo, flags: InstallFlags): void {
  if (!flags.json && r.reused.length > 0) {
    process.stderr.write(`  reused from this host: ${r.reused.join(', ')}\n`);
  }
  show(r, flags, [r.tag]);
}

async function unpack(file: string, flags: InstallFlags): Promise<void> {
  const { packs, onProgress } = packClient(flags);
  showInstalled(await packs.unpack(resolve(file), { ...installOptions(flags), onProgress }), flags);
}
