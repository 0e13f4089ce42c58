/** `forkd create`: start a sandbox through the daemon and print its id (or all of it, `--json`). */
import type { Command } from 'commander';
import { Sandbox } from '@forkd/sdk';
import { sandboxToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { idleOptions, parseIdleFlags, type IdleFlags } from './idle-flags.js';
import { limitOptions, parseLimitFlags, type LimitFlags } from './limits.js';
import { action, printJson } from './output.js';
import {
  networkOptions,
  parseEgress,
  parseNetworkMode,
  type NetworkFlags,
} from './network-flags.js';
import {
  collect,
  optionalName,
  parseCpus,
  parseEnv,
  parseLabels,
  parseMemory,
  parseSandboxTimeout,
} from './parse.js';

interface CreateFlags extends DaemonFlags, NetworkFlags, LimitFlags, IdleFlags {
  image?: string;
  memory?: string;
  cpus?: string;
  env: string[];
  timeout?: string;
  label: string[];
  cold?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    idleOptions(limitOptions(networkOptions(cmd), "the sandbox's"), "the sandbox's")
      .option('--image <name>', "image to boot (default: the daemon's)")
      .option('--memory <size>', 'guest memory, e.g. 256M or 1G')
      .option('--cpus <n>', 'virtual CPUs')
      .option('-e, --env <K=V>', 'environment variable for every command (repeatable)', collect, [])
      .option('--timeout <seconds>', 'kill the sandbox after this many seconds')
      .option('--label <k=v>', 'label (repeatable)', collect, [])
      .option('--cold', "boot the image's kernel instead of forking its boot snapshot")
      .option('--json', 'machine-readable output'),
  ).action(
    action(async (flags: CreateFlags) => {
      const timeoutS = parseSandboxTimeout(flags.timeout);
      const sandbox = await Sandbox.create({
        ...clientConfig(flags),
        image: optionalName(flags.image, '--image'),
        memoryMib: flags.memory === undefined ? undefined : parseMemory(flags.memory),
        cpus: flags.cpus === undefined ? undefined : parseCpus(flags.cpus),
        env: parseEnv(flags.env),
        timeoutMs: timeoutS === undefined ? undefined : timeoutS * 1000,
        labels: parseLabels(flags.label),
        network: parseNetworkMode(flags.network),
        egress: parseEgress(flags),
        limits: parseLimitFlags(flags),
        idle: parseIdleFlags(flags),
        cold: flags.cold || undefined,
      });
      if (flags.json) printJson(sandboxToWire(sandbox.info));
      else process.stdout.write(`${sandbox.id}\n`);
    }),
  );
}
