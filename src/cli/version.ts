/** `forkd version`: the product version, plus the QEMU version and accelerator in use. */
import type { Command } from 'commander';
import { VERSION } from '@forkd/sdk';
import { action, printJson } from './output.js';

export function register(cmd: Command): void {
  cmd.option('--json', 'machine-readable output').action(
    action(async (opts: { json?: boolean }) => {
      if (opts.json) printJson({ version: VERSION, node: process.version });
      else process.stdout.write(`forkd ${VERSION} (node ${process.version})\n`);
    }),
  );
}
