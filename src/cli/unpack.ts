/**
 * `forkd unpack FILE [--tag NEW] [--force]`: verify a snapshot pack in full, then install
 * its chain and image (docs/packs.md); prints the installed tag.
 */
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { Forkd, type InstallInfo } from '@forkd/sdk';
import { captureAfter } from './boot-snapshot.js';
import { clientConfig, daemonOptions } from './client.js';
import { action } from './output.js';
import { parseName } from './parse.js';
import { packClient, show, type PackFlags } from './pack.js';

export interface InstallFlags extends PackFlags {
  tag?: string;
  force?: boolean;
  /** `--no-boot-snapshot`: false. */
  bootSnapshot?: boolean;
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
    .option('--json', 'machine-readable output, no progress')
    .option(
      '--no-boot-snapshot',
      "do not capture the boot snapshot of the snapshot's image now (its first start captures it)",
    );
}

export function installOptions(flags: InstallFlags) {
  return {
    tag: flags.tag === undefined ? undefined : parseName(flags.tag, '--tag'),
    force: flags.force,
  };
}

/**
 * The tag on stdout; what was reused and resumed on stderr. The snapshot's image gets its
 * boot snapshot first (a warning when it cannot; `--no-boot-snapshot` skips it).
 */
export async function showInstalled(r: InstallInfo, flags: InstallFlags): Promise<void> {
  if (!flags.json && r.reused.length > 0) {
    process.stderr.write(`  reused from this host: ${r.reused.join(', ')}\n`);
  }
  const daemon = new Forkd(clientConfig(flags));
  const warnings = r.image ? await captureAfter(r.image, flags, { daemon }) : [];
  show(warnings.length > 0 ? { ...r, warnings } : r, flags, [r.tag]);
}

async function unpack(file: string, flags: InstallFlags): Promise<void> {
  const { packs, onProgress } = packClient(flags);
  const r = await packs.unpack(resolve(file), { ...installOptions(flags), onProgress });
  await showInstalled(r, flags);
}
