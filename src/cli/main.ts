#!/usr/bin/env node
/**
 * The `forkd` command: one file per verb under src/cli/, each exporting `register`.
 */
import { Command } from 'commander';
import { VERSION } from '@forkd/sdk';
import { register as registerVersion } from './version.js';

const program = new Command('forkd')
  .description('Fork warm microVM sandboxes from snapshots; branch running ones.')
  .version(VERSION, '-V, --version-flag')
  .showHelpAfterError();

for (const register of [registerVersion]) register(program);

await program.parseAsync(process.argv);
