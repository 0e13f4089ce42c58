/**
 * `forkd push TAG REF`: the snapshot and its chain as an OCI artifact in a registry
 * (docs/packs.md); only blobs the registry lacks are uploaded. Prints REF@DIGEST.
 */
import type { Command } from 'commander';
import { daemonOptions } from './client.js';
import { action, formatBytes } from './output.js';
import { parseName, usage } from './parse.js';
import { packClient, show, type PackFlags } from './pack.js';

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<tag>', 'snapshot tag')
      .argument('<ref>', 'REGISTRY/REPOSITORY[:TAG]')
      .option(
        '--format <format>',
        'chunks (default: content-addressed chunks) or files (one blob per file, for older forkd)',
      )
      .option('--json', 'machine-readable output, no progress'),
  ).action(action(push));
}

async function push(
  tag: string,
  ref: string,
  flags: PackFlags & { format?: string },
): Promise<void> {
  const { packs, onProgress } = packClient(flags);
  const format = parseFormat(flags.format);
  const r = await packs.push(parseName(tag, 'the snapshot tag'), ref, { onProgress, format });
  if (!flags.json) {
    process.stderr.write(
      `  ${r.uploaded} uploaded (${formatBytes(r.bytesUploaded)}), ${r.skipped} already there, ${r.mounted} mounted of ${r.blobs} blobs\n`,
    );
  }
  show(r, flags, [r.reference]);
}

function parseFormat(v: string | undefined): 'chunks' | 'files' | undefined {
  if (v === undefined || v === 'chunks' || v === 'files') return v;
  throw usage(`--format ${v}: write chunks or files`, { flag: '--format' });
}
