/**
 * `forkd login REGISTRY`: give the daemon credentials for a registry. It checks them
 * against the registry first and keeps them for pulls. The password comes from stdin with
 * `--password-stdin` (so it stays out of shell history and `ps`), or from FORKD_REGISTRY_PASSWORD.
 */
import type { Command } from 'commander';
import { Forkd } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action } from './output.js';
import { usage } from './parse.js';

interface LoginFlags extends DaemonFlags {
  username?: string;
  passwordStdin?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<registry>', 'registry host[:port]')
      .option('-u, --username <user>', 'user name')
      .option('--password-stdin', 'read the password (or token) from stdin'),
  ).action(action(login));
}

async function login(registry: string, flags: LoginFlags): Promise<void> {
  if (!flags.username) throw usage('missing --username USER');
  const password = flags.passwordStdin
    ? (await readStdin()).replace(/\r?\n$/, '')
    : process.env.FORKD_REGISTRY_PASSWORD;
  if (!password)
    throw usage('give the password on stdin with --password-stdin (or in FORKD_REGISTRY_PASSWORD)');
  await new Forkd(clientConfig(flags)).images.login({
    registry,
    username: flags.username,
    password,
  });
  process.stdout.write(`logged in to ${registry}\n`);
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
