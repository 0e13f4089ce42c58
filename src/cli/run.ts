/**
 * `forkd run`: boot a sandbox from an image, run one command with stdin/stdout/stderr
 * wired through, exit with its exit code, and leave nothing behind. Through the daemon
 * when one runs (create → exec → kill), else in this process.
 */
import type { Command } from 'commander';
import { Sandbox as DaemonSandbox } from '@forkd/sdk';
import { paths } from '../config.js';
import { ForkdError } from '../errors.js';
import { DEFAULT_IMAGE } from '../services/images/index.js';
import { bootSandbox, destroySandbox, type Sandbox } from '../services/sandboxes/sandbox.js';
import {
  collect,
  commandFailed,
  drained,
  exitCodeOf,
  findDaemon,
  parseTimeout,
  pumpStdin,
} from './client.js';
import { attach } from './exec.js';
import { action } from './output.js';
import { parseEnv, parseMemory } from './parse.js';

interface RunOptions {
  image: string;
  memory: string;
  cpus: string;
  env: string[];
  timeout?: string;
  stdin?: boolean;
  json?: boolean;
}

/** A booted sandbox, wherever it runs: run the command once, then destroy it. */
interface Booted {
  run(): Promise<number>;
  destroy(): Promise<void>;
}

export function register(program: Command): void {
  program
    .command('run')
    .description('boot a sandbox, run one command in it, tear it down')
    .argument('<command...>', 'command and arguments (after --)')
    .option('--image <name>', 'image to boot', DEFAULT_IMAGE)
    .option('--memory <size>', 'guest memory, e.g. 256M or 1G', '256M')
    .option('--cpus <n>', 'virtual CPUs', '1')
    .option('-e, --env <K=V>', 'environment variable (repeatable)', collect, [])
    .option('--timeout <seconds>', 'kill the command after this many seconds (exit 124)')
    .option('-i, --stdin', 'forward stdin even when it is a terminal')
    .action(
      action(async (argv: string[], opts: RunOptions) => {
        const timeoutS = parseTimeout(opts.timeout);
        const boot = (await findDaemon()) ? bootThroughDaemon : bootInProcess;
        const stop = interruptible();
        try {
          const sandbox = await boot(argv, opts, timeoutS, stop.signal);
          stop.onInterrupt(() => sandbox.destroy());
          try {
            return await sandbox.run();
          } finally {
            await sandbox.destroy();
          }
        } catch (e) {
          if (stop.signal.aborted) return 130;
          throw e;
        } finally {
          stop.dispose();
        }
      }),
    );
}

function wantsStdin(opts: RunOptions): boolean {
  return Boolean(opts.stdin) || !process.stdin.isTTY;
}

async function bootInProcess(
  argv: string[],
  opts: RunOptions,
  timeoutS: number | undefined,
  signal: AbortSignal,
): Promise<Booted> {
  const sandbox = await bootSandbox(paths(), {
    image: opts.image,
    memoryMiB: parseMemory(opts.memory),
    cpus: Number(opts.cpus),
    env: parseEnv(opts.env),
    signal,
  });
  return {
    run: () => runIn(sandbox, argv, timeoutS, wantsStdin(opts)),
    destroy: () => destroySandbox(sandbox),
  };
}

/**
 * The daemon goes on booting when the client hangs up, so an interrupt during create is
 * honoured once the id is known: the sandbox is killed rather than left behind.
 */
async function bootThroughDaemon(
  argv: string[],
  opts: RunOptions,
  timeoutS: number | undefined,
  signal: AbortSignal,
): Promise<Booted> {
  const sandbox = await DaemonSandbox.create({
    image: opts.image,
    memoryMib: parseMemory(opts.memory),
    cpus: Number(opts.cpus),
    env: parseEnv(opts.env),
  });
  if (signal.aborted) {
    await sandbox.kill().catch(() => undefined);
    throw signal.reason;
  }
  return {
    run: () =>
      attach(sandbox, argv, { timeoutS, forwardStdin: wantsStdin(opts), forwardSignals: false }),
    destroy: () => sandbox.kill().catch(() => undefined),
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
    controller.abort(new ForkdError('bad_request', 'interrupted'));
    if (cleanup) void cleanup().finally(() => process.exit(130));
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

async function runIn(
  sb: Sandbox,
  argv: string[],
  timeoutS: number | undefined,
  forwardStdin: boolean,
): Promise<number> {
  const timeoutMs = timeoutS === undefined ? undefined : Math.round(timeoutS * 1000);
  try {
    const exec = sb.agent.exec(
      { argv, stdin: forwardStdin, timeoutMs },
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
    const result = await exec.result;
    await drained();
    return exitCodeOf(result, timeoutS);
  } catch (e) {
    return commandFailed(e, argv);
  } finally {
    process.stdin.destroy();
  }
}
