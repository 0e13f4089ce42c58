#!/usr/bin/env node
/**
 * The `forkd` command: one file per verb under src/cli/, each exporting `register`.
 */
import { Command } from 'commander';
import { VERSION } from '@forkd/sdk';
import { register as registerDoctor } from './doctor.js';
import { register as registerImage } from './image.js';
import { register as registerImages } from './images.js';
import { register as registerRun } from './run.js';
import { register as registerSetup } from './setup.js';
import { register as registerVersion } from './version.js';

const program = new Command('forkd')
  .description('Fork warm microVM sandboxes from snapshots; branch running ones.')
  .version(VERSION, '-V, --version-flag')
  .showHelpAfterError();

for (const register of [
  registerRun,
  registerImage,
  registerImages,
  registerDoctor,
  registerSetup,
  registerVersion,
]) {
  register(program);
}

await program.parseAsync(process.argv);
