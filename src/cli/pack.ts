/**
 * `forkd pack TAG -o FILE`: the snapshot, its chain of parents and its image in one
 * tar+zstd file (docs/packs.md). Also what the other pack verbs share: progress lines on
 * stderr (none with `--json`), the result on stdout.
 */
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { Forkd } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, formatBytes, printJson } from './output.js';
import { parseName } from './parse.js';

export interface PackFlags extends DaemonFlags {
  json?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<tag>', 'snapshot tag')
      .requiredOption('-o, --output <file>', 'the pack file to write (on the daemon host)')
      .option('--json', 'machine-readable output, no progress'),
  ).action(action(pack));
}

/** The SDK's pack calls with this verb's flags: progress on stderr unless --json. */
export function packClient(flags: PackFlags) {
  const forkd = new Forkd(clientConfig(flags));
  const onProgress = flags.json ? undefined : (m: string) => process.stderr.write(`  ${m}\n`);
  return { packs: forkd.packs, onProgress };
}

/** Print a result: its JSON (snake_case, as the API answers) or `lines`. */
export function show(result: object, flags: PackFlags, lines: string[]): void {
  if (flags.json) return printJson(snake(result));
  for (const l of lines) process.stdout.write(`${l}\n`);
}

export function snake(value: object): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value))
    out[k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)] = v;
  return out;
}

async function pack(tag: string, flags: PackFlags & { output: string }): Promise<void> {
  const { packs, onProgress } = packClient(flags);
  const r = await packs.pack(parseName(tag, 'the snapshot tag'), resolve(flags.output), {
    onProgress,
  });
  show(r, flags, [
    `${r.file}: ${formatBytes(r.bytes)} (${r.files} files, ${formatBytes(r.logicalBytes)} unpacked; chain ${r.chain.join(' → ')}${r.image ? `, image ${r.image}` : ''})`,
  ]);
}
