/**
 * `forkd build [-f Dockerfile] [--tag TAG] [--build-arg K=V]… [CONTEXT]` (docs/build.md):
 * the context directory goes to the daemon as a tar stream (a Dockerfile outside it is
 * added as `.forkd/Dockerfile`), the daemon runs every step in a forkd VM and caches each
 * as a snapshot. Each step is printed with its output, then `CACHED` or its time, on
 * stderr; the published tag on stdout. `--json`: one event per line, then the result
 * (`type: result`).
 * `forkd build prune` removes the step snapshots nothing uses.
 */
import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { basename, dirname, relative, resolve } from 'node:path';
import type { Command } from 'commander';
import { Forkd, type BuildEvent } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, formatBytes, printJson } from './output.js';
import {
  collect,
  parseCount,
  parseCpus,
  parseEnv,
  parseMemory,
  parseName,
  usage,
} from './parse.js';

interface BuildFlags extends DaemonFlags {
  file?: string;
  tag?: string;
  buildArg: string[];
  cache: boolean;
  /** `--no-cache-from N`: commander reads a `--no-` prefix as a negation, so N lands here. */
  cacheFrom?: string | boolean;
  memory?: string;
  cpus?: string;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('[context]', 'the build context directory (default: .)')
      .option('-f, --file <path>', 'the Dockerfile (default: CONTEXT/Dockerfile)')
      .option('-t, --tag <tag>', 'publish the result under this snapshot tag')
      .option('--build-arg <K=V>', 'a build arg (repeatable)', collect, [])
      .option('--no-cache', 'run every step again')
      .option('--no-cache-from <step>', 'run this step (1-based, after FROM) and later ones again')
      .option('--memory <size>', "the build VMs' memory (e.g. 512M)")
      .option('--cpus <n>', "the build VMs' vCPUs")
      .option('--json', 'events as JSON lines, the result last'),
  ).action(action(build));
  daemonOptions(
    cmd
      .command('prune')
      .description('remove the build step snapshots nothing uses')
      .option('--json', 'machine-readable output'),
  ).action(action(prune));
}

async function build(context: string | undefined, flags: BuildFlags): Promise<void> {
  const dir = resolve(context ?? '.');
  if (!(await stat(dir).catch(() => null))?.isDirectory()) {
    throw usage(`the build context ${dir} is not a directory`);
  }
  const file = resolve(dir, flags.file ?? 'Dockerfile');
  const inside = !relative(dir, file).startsWith('..');
  const opts = {
    tag: flags.tag === undefined ? undefined : parseName(flags.tag, 'snapshot tag'),
    dockerfile: inside ? relative(dir, file) : '.forkd/Dockerfile',
    buildArgs: parseEnv(flags.buildArg, '--build-arg'),
    noCache: !flags.cache,
    noCacheFrom:
      typeof flags.cacheFrom === 'string'
        ? parseCount(flags.cacheFrom, '--no-cache-from', { min: 1, max: 10000 })
        : undefined,
    memoryMib: flags.memory === undefined ? undefined : parseMemory(flags.memory),
    cpus: flags.cpus === undefined ? undefined : parseCpus(flags.cpus),
  };
  const tar = contextTar(dir, inside ? undefined : file);
  const show = flags.json ? jsonLine : progressPrinter();
  const result = await new Forkd(clientConfig(flags)).builds.build(tar.stdout, {
    ...opts,
    onEvent: show,
  });
  await tar.done;
  if (flags.json) return jsonLine({ type: 'result', ...result });
  const ran = result.steps.filter((s) => s.status === 'ran');
  const disk = ran.reduce((n, s) => n + s.diskBytes, 0);
  process.stderr.write(
    `built in ${seconds(result.durationMs)}: ${ran.length} step(s) ran (${formatBytes(disk)} of new snapshots), ` +
      `${result.steps.filter((s) => s.status === 'cached').length} cached\n`,
  );
  process.stdout.write(`${result.tag ?? result.snapshot ?? ''}\n`);
}

/** The context as a tar stream (GNU tar); a Dockerfile outside it joins as .forkd/Dockerfile. */
function contextTar(dir: string, outside: string | undefined) {
  const args = ['-c', '-f', '-', '-C', dir, '.'];
  if (outside) {
    const name = basename(outside);
    args.push(
      '-C',
      dirname(outside),
      `--transform=s,^${name.replace(/[.^$*]/g, '\\$&')}$,.forkd/Dockerfile,`,
      name,
    );
  }
  const child = spawn('tar', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<void>((res, rej) =>
    child.on('close', (code) =>
      code === 0 ? res() : rej(usage(`tar of the build context failed: ${stderr.trim()}`)),
    ),
  );
  done.catch(() => undefined);
  return { stdout: child.stdout, done };
}

/** Steps and their output on stderr, as `docker build` shows them. */
function progressPrinter(): (e: BuildEvent) => void {
  return (e) => {
    if (e.type === 'step') process.stderr.write(`#${e.step}/${e.total} ${e.instruction}\n`);
    else if (e.type === 'output') process.stderr.write(e.data);
    else if (e.type === 'message') process.stderr.write(`   ${e.message}\n`);
    else if (e.status === 'cached') process.stderr.write(`   CACHED\n`);
    else if (e.status === 'ran') process.stderr.write(`   done in ${seconds(e.durationMs)}\n`);
  };
}

/** One JSON value per line (the events, then the result), for scripts to read as they come. */
function jsonLine(value: object): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

async function prune(flags: DaemonFlags): Promise<void> {
  const removed = await new Forkd(clientConfig(flags)).builds.prune();
  if (flags.json) return printJson({ removed });
  process.stderr.write(`removed ${removed.length} unused build step snapshot(s)\n`);
  for (const t of removed) process.stdout.write(`${t}\n`);
}
