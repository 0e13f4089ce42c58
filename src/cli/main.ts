#!/usr/bin/env node
/**
 * The `forkd` command: one file per verb under src/cli/, each exporting `register`.
 */
import { Command } from 'commander';
import { VERSION } from '@forkd/sdk';
import { register as registerBranch } from './branch.js';
import { register as registerDaemon } from './daemon.js';
import { register as registerCp } from './cp.js';
import { register as registerCreate } from './create.js';
import { register as registerDoctor } from './doctor.js';
import { register as registerExec } from './exec.js';
import { register as registerFork } from './fork.js';
import { register as registerImage } from './image.js';
import { register as registerImages } from './images.js';
import { register as registerKill } from './kill.js';
import { register as registerLogs } from './logs.js';
import { register as registerPs } from './ps.js';
import { register as registerRmi } from './rmi.js';
import { register as registerRun } from './run.js';
import { register as registerSetup } from './setup.js';
import { register as registerSnapshot } from './snapshot.js';
import { register as registerSnapshots } from './snapshots.js';
import { register as registerTree } from './tree.js';
import { register as registerVersion } from './version.js';

const program = new Command('forkd')
  .description('Fork warm microVM sandboxes from snapshots; branch running ones.')
  .version(VERSION, '-V, --version-flag')
  .showHelpAfterError();

for (const register of [
  registerRun,
  registerCreate,
  registerExec,
  registerPs,
  registerCp,
  registerLogs,
  registerKill,
  registerImage,
  registerImages,
  registerSnapshot,
  registerSnapshots,
  registerFork,
  registerBranch,
  registerTree,
  registerRmi,
  registerDaemon,
  registerDoctor,
  registerSetup,
  registerVersion,
]) {
  register(program);
}

await program.parseAsync(process.argv);
