/**
 * `forkd run`: start a sandbox from an image (a fork of its boot snapshot unless `--cold`),
 * run one command with stdin/stdout/stderr wired through, exit with its exit code, and
 * leave nothing behind. Through the daemon when one runs (create → exec → kill), else in
 * this process (a restore of the boot snapshot in a fresh QEMU).
 */
import type { Command } from 'commander';
import { Sandbox as DaemonSandbox, type Forkd, type LimitsOptions } from '@forkd/sdk';
import type { Paths } from '../config.js';
import type { restoreBootSnapshot, Sandbox } from '../services/local.js';
import { commandFailed, findDaemon, forwardsStdin, pumpStdin } from './client.js';
import { commandExit, EXIT } from './exit.js';
import { attach } from './exec.js';
import { limitOptions, parseLimitFlags, type LimitFlags } from './limits.js';
import { action, drained } from './output.js';
import { phase } from '../util/phases.js';
import {
  collect,
  optionalName,
  parseCommandTimeout,
  parseCpus,
  parseEnv,
  parseCwd,
  parseMemory,
  parseUser,
  usage,
} from './parse.js';

interface RunOptions extends LimitFlags {
  image?: string;
  memory: string;
  cpus: string;
  env: string[];
  cwd?: string;
  user?: string;
  timeout?: string;
  stdin?: boolean;
  json?: boolean;
  cold?: boolean;
  verbose?: boolean;
}

/** The flags checked and parsed: what either way of booting needs. */
interface RunRequest {
  image?: string;
  memoryMiB: number;
  cpus: number;
  env: Record<string, string>;
  /** Its QEMU's cgroup limits (absent: the defaults, as for a daemon's sandbox). */
  limits?: LimitsOptions;
  timeoutS?: number;
  forwardStdin: boolean;
  /** `--cwd`, `--user`; else the image config's WorkingDir and User. */
  cwd?: string;
  user?: string;
  /** Boot the kernel for real instead of forking the image's boot snapshot. */
  cold: boolean;
  /** Say on stderr how the sandbox started. */
  verbose: boolean;
}

/** A booted sandbox, wherever it runs: run the command once, then destroy it. */
interface Booted {
  run(): Promise<number>;
  destroy(): Promise<void>;
}

export function register(cmd: Command): void {
  limitOptions(cmd, "the sandbox's")
    .argument(
      '[command...]',
      "command and arguments (after --); default: the image's Entrypoint + Cmd",
    )
    .option('--image <name>', 'image to boot (default: busybox)')
    .option('--memory <size>', 'guest memory, e.g. 256M or 1G', '256M')
    .option('--cpus <n>', 'virtual CPUs', '1')
    .option('-e, --env <K=V>', 'environment variable (repeatable)', collect, [])
    .option('--cwd <dir>', "working directory in the sandbox (default: the image's WorkingDir)")
    .option('--user <user>', "user name or uid to run as (default: the image's User)")
    .option('--timeout <seconds>', 'kill the command after this many seconds (exit 124)')
    .option('-i, --stdin', 'forward stdin even when it is a terminal')
    .option('--cold', "boot the image's kernel instead of forking its boot snapshot")
    .option('-v, --verbose', 'say on stderr how the sandbox started (forked or booted, and why)')
    .action(
      action(async (argv: string[], opts: RunOptions) => {
        const req = runRequest(opts);
        if (argv.length === 0 && req.image === undefined) {
          throw usage(
            'missing the command: give one after --, or an image whose config has a Cmd (--image)',
          );
        }
        const daemon = await findDaemon();
        phase(daemon ? 'cli: daemon found' : 'cli: no daemon');
        const boot = daemon ? bootThroughDaemon : bootInProcess;
        if (argv.length === 0) argv = await imageCommand(req.image!, daemon);
        const stop = interruptible();
        try {
          const sandbox = await boot(argv, req, stop.signal);
          phase('cli: sandbox ready');
          stop.onInterrupt(() => sandbox.destroy());
          try {
            return await sandbox.run();
          } finally {
            phase('cli: command done');
            await sandbox.destroy();
            phase('cli: sandbox destroyed');
          }
        } catch (e) {
          if (stop.signal.aborted) return EXIT.interrupted;
          throw e;
        } finally {
          stop.dispose();
        }
      }),
    );
}

function runRequest(opts: RunOptions): RunRequest {
  return {
    image: optionalName(opts.image, '--image'),
    memoryMiB: parseMemory(opts.memory),
    cpus: parseCpus(opts.cpus),
    env: parseEnv(opts.env),
    cwd: parseCwd(opts.cwd),
    user: parseUser(opts.user),
    limits: parseLimitFlags(opts),
    timeoutS: parseCommandTimeout(opts.timeout),
    forwardStdin: forwardsStdin(opts.stdin),
    cold: Boolean(opts.cold),
    verbose: Boolean(opts.verbose),
  };
}

/** `--verbose`: one line on stderr saying how the sandbox started. */
function tell(req: RunRequest, line: string): void {
  if (req.verbose) process.stderr.write(`forkd: ${line}\n`);
}

/**
 * With no command, `run` runs what the image config says (Entrypoint + Cmd); an image
 * without one needs a command. Its WorkingDir and User apply to any command, this one too.
 */
async function imageCommand(image: string, daemon: Forkd | undefined): Promise<string[]> {
  let config: { entrypoint?: string[]; cmd?: string[] } | undefined;
  if (daemon) config = (await daemon.images.get(image)).config;
  else {
    const [{ paths }, { getImage }] = await Promise.all([
      import('../config.js'),
      import('../services/local.js'),
    ]);
    config = (await getImage(paths(), image)).config;
  }
  const argv = [...(config?.entrypoint ?? []), ...(config?.cmd ?? [])];
  if (argv.length === 0) {
    throw usage(
      'missing the command: give one after --, or use an image whose config has an Entrypoint or Cmd',
    );
  }
  return argv;
}

/** Without a daemon the VM runs in this process: only then are the services loaded. */
async function bootInProcess(
  argv: string[],
  req: RunRequest,
  signal: AbortSignal,
): Promise<Booted> {
  const [{ paths }, local] = await Promise.all([
    import('../config.js'),
    import('../services/local.js'),
  ]);
  phase('local: services loaded');
  local.wireVmm();
  const { DEFAULT_IMAGE, getImage, imageEnv, imageExecDefaults, withExecDefaults } = local;
  const { bootSandbox, destroySandbox, resolveResources, Limiter, runCgroupParent } = local;
  const p = paths();
  // The same cgroup and default limits as a daemon's sandbox, under a parent of its own.
  const limiter = new Limiter({ home: p.home, parent: runCgroupParent(p.home) });
  const asked = req.limits && { ...req.limits, memory: req.limits.memory?.toString() };
  const limits = await limiter.resolve(asked, resolveResources(req));
  const image = await getImage(p, req.image ?? DEFAULT_IMAGE);
  phase('local: limits and image');
  const start = {
    image: image.name,
    memoryMiB: req.memoryMiB,
    cpus: req.cpus,
    env: { ...imageEnv(image), ...req.env },
    signal,
    placement: { limiter, limits },
  };
  let sandbox = req.cold ? undefined : await restored(p, start, req);
  if (!sandbox) {
    sandbox = await bootSandbox(p, start);
    tell(req, `booted the kernel of image ${image.name}${req.cold ? ' (--cold)' : ''}`);
  }
  // As a daemon's sandbox does: the image's WorkingDir and User where no flag names them.
  const full = withExecDefaults(req, imageExecDefaults(image));
  return {
    run: () => runIn(sandbox, argv, full),
    destroy: () => destroySandbox(sandbox),
  };
}

/**
 * The image's boot snapshot restored in this process, or undefined (said with --verbose)
 * when it cannot be had: the caller boots then.
 */
async function restored(
  p: Paths,
  start: Parameters<typeof restoreBootSnapshot>[1],
  req: RunRequest,
): Promise<Sandbox | undefined> {
  const { restoreBootSnapshot } = await import('../services/local.js');
  try {
    const r = await restoreBootSnapshot(p, start);
    const how = r.captured ? `captured it in ${r.captureMs} ms, then ` : '';
    tell(req, `${how}restored boot snapshot ${r.tag} of image ${start.image}`);
    return r.sandbox;
  } catch (e) {
    start.signal?.throwIfAborted();
    const why = e instanceof Error ? e.message : String(e);
    process.stderr.write(`forkd: no boot snapshot of image ${start.image} (${why}): booting it\n`);
    return undefined;
  }
}

/**
 * The daemon goes on booting when the client hangs up, so an interrupt during create is
 * honoured once the id is known: the sandbox is killed rather than left behind.
 */
async function bootThroughDaemon(
  argv: string[],
  req: RunRequest,
  signal: AbortSignal,
): Promise<Booted> {
  const sandbox = await DaemonSandbox.create({
    image: req.image,
    memoryMib: req.memoryMiB,
    cpus: req.cpus,
    env: req.env,
    limits: req.limits,
    cold: req.cold || undefined,
  });
  const { snapshot } = sandbox.info;
  tell(
    req,
    snapshot ? `forked ${sandbox.id} from boot snapshot ${snapshot}` : `booted ${sandbox.id}`,
  );
  if (signal.aborted) {
    await sandbox.kill().catch(() => undefined);
    throw signal.reason;
  }
  return {
    run: () =>
      attach(sandbox.commands, argv, {
        timeoutS: req.timeoutS,
        forwardStdin: req.forwardStdin,
        forwardSignals: false,
        cwd: req.cwd,
        user: req.user,
      }),
    // The daemon tears it down: this command ends as soon as the exit code is known.
    destroy: () => sandbox.kill({ wait: false }).catch(() => undefined),
  };
}

/**
 * SIGINT/SIGTERM while booting aborts the boot (which cleans up after itself); once the
 * sandbox runs, they tear it down and exit 130. Either way nothing is left behind.
 */
function interruptible() {
  const controller = new AbortController();
  let cleanup: (() => Promise<void>) | undefined;
  const onSignal = () => {
    controller.abort(usage('interrupted'));
    if (cleanup) void cleanup().finally(() => process.exit(EXIT.interrupted));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return {
    signal: controller.signal,
    onInterrupt(fn: () => Promise<void>) {
      cleanup = fn;
    },
    dispose() {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

async function runIn(sb: Sandbox, argv: string[], req: RunRequest): Promise<number> {
  const { timeoutS, forwardStdin, cwd, user } = req;
  const timeoutMs = timeoutS === undefined ? undefined : Math.round(timeoutS * 1000);
  try {
    const exec = sb.agent.exec(
      { argv, stdin: forwardStdin, timeoutMs, cwd, user },
      {
        onStdout: (c) => process.stdout.write(c),
        onStderr: (c) => process.stderr.write(c),
      },
    );
    if (forwardStdin) {
      void pumpStdin(
        (chunk) => exec.writeStdin(chunk),
        () => exec.endStdin(),
      );
    }
    phase('cli: exec sent');
    const result = await exec.result;
    phase('cli: exec result');
    await drained();
    return commandExit(result, timeoutS);
  } catch (e) {
    return commandFailed(e, argv);
  } finally {
    process.stdin.destroy();
  }
}
