/**
 * `forkd pull REF [--tag NEW] [--force]`: a pushed snapshot (or an https:// pack file) with
 * the parents this host lacks, verified, then installed (docs/packs.md). An interrupted
 * pull resumes where it stopped. Prints the installed tag. `--prefetch`: what the first
 * `forkd fork REF` would pull, ready before it (a node that should be warm for its pods).
 */
import type { Command } from 'commander';
import { daemonOptions } from './client.js';
import { action } from './output.js';
import { packClient } from './pack.js';
import { installFlags, installOptions, showInstalled, type InstallFlags } from './unpack.js';

export function register(cmd: Command): void {
  daemonOptions(
    installFlags(
      cmd
        .argument('<ref>', 'REGISTRY/REPOSITORY[:TAG][@DIGEST] or https://…/x.forkd.tar.zst')
        .option('--prefetch', 'ready REF for `forkd fork REF` (the node cache; no --tag/--force)'),
    ),
  ).action(action(pull));
}

async function pull(ref: string, flags: InstallFlags & { prefetch?: boolean }): Promise<void> {
  const { packs, onProgress } = packClient(flags);
  const opts = { ...installOptions(flags), prefetch: flags.prefetch, onProgress };
  await showInstalled(await packs.pull(ref, opts), flags);
}
