/**
 * `forkd pull REF [--tag NEW] [--force]`: a pushed snapshot (or an https:// pack file) with
 * the parents this host lacks, verified, then installed (docs/packs.md). An interrupted
 * pull resumes where it stopped. Prints the installed tag.
 */
import type { Command } from 'commander';
import { daemonOptions } from './client.js';
import { action } from './output.js';
import { packClient } from './pack.js';
import { installFlags, installOptions, showInstalled, type InstallFlags } from './unpack.js';

export function register(cmd: Command): void {
  daemonOptions(
    installFlags(
      cmd.argument('<ref>', 'REGISTRY/REPOSITORY[:TAG][@DIGEST] or https://…/x.forkd.tar.zst'),
    ),
  ).action(action(pull));
}

async function pull(ref: string, flags: InstallFlags): Promise<void> {
  const { packs, onProgress } = packClient(flags);
  showInstalled(await packs.pull(ref, { ...installOptions(flags), onProgress }), flags);
}
