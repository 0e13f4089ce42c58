/**
 * `forkd run`: boot a sandbox from an image, run one command with stdin/stdout/stderr
 * wired through, exit with its exit code, and leave nothing behind.
 */
import type { Command } from 'commander';
import { paths } from '../config.js';
import { ForkdError } from '../errors.js';
import { DEFAULT_IMAGE } from '../services/images.js';
import { bootSandbox, destroySandbox, type Sandbox } from '../services/sandboxes.js';
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

const SIGNAL_NUMBERS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGABRT: 6,
  SIGKILL: 9,
  SIGSEGV: 11,
  SIGPIPE: 13,
  SIGTERM: 15,
};

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
        const timeoutS = opts.timeout === undefined ? undefined : Number(opts.timeout);
        if (timeoutS !== undefined && !(timeoutS > 0)) {
          throw new ForkdError('bad_request', '--timeout must be a positive number of seconds');
        }
        const stop = interruptible();
        try {
          const sandbox = await bootSandbox(paths(), {
            image: opts.image,
            memoryMiB: parseMemory(opts.memory),
            cpus: Number(opts.cpus),
            env: parseEnv(opts.env),
            signal: stop.signal,
          });
          stop.onInterrupt(() => destroySandbox(sandbox));
          try {
            return await runIn(
              sandbox,
              argv,
              timeoutS,
              Boolean(opts.stdin) || !process.stdin.isTTY,
            );
          } finally {
            await destroySandbox(sandbox);
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

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
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
    if (forwardStdin) void pumpStdin(exec);
    const result = await exec.result;
    await drained();
    if (result.timedOut) {
      process.stderr.write(`forkd: command timed out after ${timeoutS} s\n`);
      return 124;
    }
    if (result.exitCode !== null) return result.exitCode;
    return 128 + (SIGNAL_NUMBERS[result.signal ?? ''] ?? 0);
  } catch (e) {
    if (e instanceof ForkdError && e.code === 'command_not_found') {
      process.stderr.write(`forkd: ${argv[0]}: command not found in image\n`);
      return 127;
    }
    throw e;
  } finally {
    process.stdin.destroy();
  }
}

async function pumpStdin(exec: {
  writeStdin(c: Buffer): Promise<void>;
  endStdin(): Promise<void>;
}): Promise<void> {
  try {
    for await (const chunk of process.stdin) await exec.writeStdin(chunk as Buffer);
    await exec.endStdin();
  } catch {
    // The command may exit before reading all of stdin; that is not an error of run.
  }
}

function drained(): Promise<void> {
  return new Promise((resolve) => {
    if (process.stdout.writableNeedDrain) process.stdout.once('drain', () => resolve());
    else resolve();
  });
}
