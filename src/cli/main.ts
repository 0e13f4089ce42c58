#!/usr/bin/env node
/**
 * The `forkd` command. Each verb is one module under src/cli/ that configures its own
 * command; only the module of the verb being run is loaded (`import()`), so a client verb
 * never loads the daemon, Fastify or SQLite.
 * The other verbs are listed by name and summary only, for `forkd --help`. Usage errors
 * (an unknown verb or option, a missing argument) exit 2; see exit.ts for the rest.
 */
import { Command, CommanderError } from 'commander';
import { VERSION } from '@forkd/sdk';
import { EXIT, quietOnBrokenPipe } from './exit.js';
import { phase } from '../util/phases.js';

/** What a verb module exports: it adds its arguments, options and action to `cmd`. */
interface VerbModule {
  register(cmd: Command): void;
}

interface Verb {
  name: string;
  summary: string;
  load(): Promise<VerbModule>;
}

const VERBS: Verb[] = [
  {
    name: 'run',
    summary: 'boot a sandbox, run one command in it, tear it down',
    load: () => import('./run.js'),
  },
  {
    name: 'create',
    summary: 'start a sandbox that outlives this command; prints its id',
    load: () => import('./create.js'),
  },
  {
    name: 'exec',
    summary: 'run a command in a running sandbox, streaming its output',
    load: () => import('./exec.js'),
  },
  {
    name: 'shell',
    summary: 'an interactive terminal in a running sandbox (a login shell, or a command)',
    load: () => import('./shell.js'),
  },
  {
    name: 'ps',
    summary: 'list sandboxes (running ones; --all for stopped and dead too)',
    load: () => import('./ps.js'),
  },
  {
    name: 'cp',
    summary: 'copy files between the host and a sandbox (ID:/path; - for stdin/stdout)',
    load: () => import('./cp.js'),
  },
  { name: 'logs', summary: "print a sandbox's console log", load: () => import('./logs.js') },
  { name: 'kill', summary: 'kill sandboxes', load: () => import('./kill.js') },
  {
    name: 'update',
    summary: "change a running sandbox's limits or timeout",
    load: () => import('./update.js'),
  },
  {
    name: 'info',
    summary: 'one sandbox in full: its limits and, while it runs, what it uses',
    load: () => import('./info.js'),
  },
  {
    name: 'image',
    summary: 'build, pull, import, inspect, list and remove images',
    load: () => import('./image.js'),
  },
  {
    name: 'images',
    summary: 'list images (same as `forkd image ls`)',
    load: () => import('./images.js'),
  },
  {
    name: 'snapshot',
    summary: 'make, inspect, verify snapshots and size their VMM pools',
    load: () => import('./snapshot.js'),
  },
  { name: 'snapshots', summary: 'list snapshots', load: () => import('./snapshots.js') },
  {
    name: 'build',
    summary: 'build a snapshot from a Dockerfile, every step cached',
    load: () => import('./build.js'),
  },
  {
    name: 'fork',
    summary: 'start N sandboxes from a snapshot, already warm; prints their ids',
    load: () => import('./fork.js'),
  },
  {
    name: 'branch',
    summary: 'capture a running sandbox into a new snapshot; the sandbox keeps running',
    load: () => import('./branch.js'),
  },
  {
    name: 'tree',
    summary: 'images, snapshots and live sandboxes as a tree of what came from what',
    load: () => import('./tree.js'),
  },
  { name: 'rmi', summary: 'remove a snapshot', load: () => import('./rmi.js') },
  {
    name: 'pack',
    summary: 'pack a snapshot with its chain into a file',
    load: () => import('./pack.js'),
  },
  {
    name: 'unpack',
    summary: 'verify and install a snapshot pack',
    load: () => import('./unpack.js'),
  },
  { name: 'push', summary: 'push a snapshot to an OCI registry', load: () => import('./push.js') },
  {
    name: 'pull',
    summary: 'pull a snapshot from a registry or URL',
    load: () => import('./pull.js'),
  },
  {
    name: 'cache',
    summary: 'the node cache of chunks and snapshots pulled by reference (ls, size, prune)',
    load: () => import('./cache.js'),
  },
  {
    name: 'daemon',
    summary: 'serve the forkd API (foreground); sandboxes outlive it',
    load: () => import('./daemon.js'),
  },
  {
    name: 'doctor',
    summary: 'check the host prerequisites and say how to fix what is missing',
    load: () => import('./doctor.js'),
  },
  {
    name: 'setup',
    summary: 'install the guest kernel, build the initramfs and the default busybox image',
    load: () => import('./setup.js'),
  },
  { name: 'version', summary: 'print the forkd version', load: () => import('./version.js') },
  {
    name: 'port',
    summary: 'publish a sandbox port on the host (or list, --remove)',
    load: () => import('./port.js'),
  },
  {
    name: 'network',
    summary: "show a sandbox's network, or change its egress policy",
    load: () => import('./network.js'),
  },
  {
    name: 'mcp',
    summary: 'serve the forkd tools to an MCP client on stdio (see docs/mcp.md)',
    load: () => import('./mcp.js'),
  },
  {
    name: 'eval',
    summary: 'run code in a warm interpreter of a sandbox (a context); --fan-out runs N variants',
    load: () => import('./eval.js'),
  },
  {
    name: 'context',
    summary: "create, list, restart, interrupt and remove a sandbox's code contexts",
    load: () => import('./context.js'),
  },
  {
    name: 'from-image',
    summary: 'pull an OCI image and make a snapshot of it in one step (cached by digest)',
    load: () => import('./from-image.js'),
  },
  {
    name: 'login',
    summary: 'give the daemon credentials for a registry (checked, then kept)',
    load: () => import('./login.js'),
  },
  {
    name: 'logout',
    summary: "make the daemon forget a registry's credentials",
    load: () => import('./logout.js'),
  },
  {
    name: 'pause',
    summary: 'pause a sandbox: stop its VM (no CPU), or --hibernate it to disk; requests wake it',
    load: () => import('./pause.js'),
  },
  { name: 'resume', summary: 'wake a paused sandbox', load: () => import('./resume.js') },
  {
    name: 'ui',
    summary: 'print (or open) the URL of the web UI; serves it locally for a unix-socket daemon',
    load: () => import('./ui.js'),
  },
];

/** The verb a command line runs (`forkd help VERB` shows VERB's help, so it needs VERB). */
function verbAsked(args: string[]): string | undefined {
  const [first, second] = args;
  return first === 'help' ? second : first;
}

async function main(argv: string[]): Promise<void> {
  phase('cli: main loaded');
  quietOnBrokenPipe();
  const program = new Command('forkd')
    .description('Fork warm microVM sandboxes from snapshots; branch running ones.')
    .version(VERSION, '-V, --version', 'print the forkd version')
    .exitOverride()
    .configureOutput({
      outputError: (text, write) => write(`forkd: ${text.replace(/^error: /, '')}`),
    })
    .showHelpAfterError('(add --help for usage)');
  const asked = verbAsked(argv.slice(2));
  for (const verb of VERBS) {
    const cmd = program.command(verb.name).description(verb.summary);
    if (verb.name === asked) (await verb.load()).register(cmd);
  }
  phase('cli: verb loaded');
  try {
    await program.parseAsync(argv);
  } catch (e) {
    // Help and --version "fail" with code 0; every other parse error is bad usage.
    if (!(e instanceof CommanderError)) throw e;
    process.exitCode = e.exitCode === 0 ? EXIT.ok : EXIT.usage;
  }
}

await main(process.argv);
