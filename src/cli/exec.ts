/**
 * `forkd exec ID -- CMD…`: run a command in a running sandbox through the daemon, output
 * streamed as it is produced (binary-safe, with backpressure), stdin forwarded, Ctrl-C
 * passed on to the command, and forkd exiting with the command's exit code.
 */
import type { Command } from 'commander';
import { Commands, Forkd, type ClientConfig, type CommandHandle } from '@forkd/sdk';
import {
  clientConfig,
  commandFailed,
  daemonOptions,
  forwardsStdin,
  pumpStdin,
  type DaemonFlags,
} from './client.js';
import { commandExit } from './exit.js';
import { action, drained } from './output.js';
import {
  collect,
  parseCommandTimeout,
  parseEnv,
  parseSandboxId,
  parseCwd,
  parseUser,
  usage,
} from './parse.js';

interface ExecFlags extends DaemonFlags {
  env: string[];
  cwd?: string;
  user?: string;
  timeout?: string;
  stdin?: boolean;
  tty?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<id>', 'sandbox id')
      .argument('<command...>', 'command and arguments (after --)')
      .option('-e, --env <K=V>', 'environment variable (repeatable)', collect, [])
      .option('--cwd <dir>', 'working directory in the sandbox (absolute)')
      .option('--user <user>', 'user name or uid to run as')
      .option('--timeout <seconds>', 'kill the command after this many seconds (exit 124)')
      .option('-i, --stdin', 'forward stdin even when it is a terminal')
      .option('-t, --tty', 'run it on a terminal, interactively (as `forkd shell ID -- CMD…`)'),
  ).action(
    action(async (id: string, argv: string[], flags: ExecFlags) => {
      if (flags.tty) return execOnTerminal(id, argv, flags);
      const options = {
        env: parseEnv(flags.env),
        cwd: parseCwd(flags.cwd),
        user: parseUser(flags.user),
        timeoutS: parseCommandTimeout(flags.timeout),
        forwardStdin: forwardsStdin(flags.stdin),
        forwardSignals: true,
      };
      return attach(commandsOf(parseSandboxId(id), clientConfig(flags)), argv, options);
    }),
  );
}

/** `exec -t`: the command on a terminal session; a timeout has no meaning there. */
async function execOnTerminal(id: string, argv: string[], flags: ExecFlags): Promise<number> {
  if (flags.timeout !== undefined) {
    throw usage('--timeout does not apply with -t: end the session with Ctrl-C or `exit`', {
      flag: '--timeout',
    });
  }
  const { ptyOf, runTerminal, shellCommand } = await import('./shell.js');
  return runTerminal(ptyOf(parseSandboxId(id), clientConfig(flags)), {
    cmd: shellCommand(argv, parseEnv(flags.env)),
    cwd: parseCwd(flags.cwd),
    user: parseUser(flags.user),
  });
}

/** How `attach` wires a command to this process. */
export interface AttachOptions {
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
  timeoutS?: number;
  forwardStdin: boolean;
  /** Pass SIGINT/SIGTERM on to the command (a second one kills it). */
  forwardSignals: boolean;
}

/**
 * Run `argv` in `sandbox` with its output on our stdout/stderr; resolves with the exit
 * code forkd should exit with. `forkd run` uses it too when a daemon runs.
 */
/**
 * The commands of sandbox `id` without looking it up first: the exec itself answers
 * sandbox_not_found or sandbox_not_running, and a short `forkd exec` is spared a round
 * trip. (The CLI ships with the SDK, so it may build this from the SDK's transport.)
 */
function commandsOf(id: string, config: ClientConfig): Commands {
  return new Commands(new Forkd(config).transport, `/v1/sandboxes/${encodeURIComponent(id)}`);
}

export async function attach(
  commands: Commands,
  argv: string[],
  o: AttachOptions,
): Promise<number> {
  try {
    const handle = await commands.start(argv, {
      envs: o.env,
      cwd: o.cwd,
      user: o.user,
      timeoutMs: o.timeoutS === undefined ? undefined : Math.round(o.timeoutS * 1000),
      keepStdinOpen: o.forwardStdin,
      onOutput: writeOutput,
    });
    if (o.forwardStdin) {
      void pumpStdin(
        (chunk) => handle.stdin.write(chunk),
        () => handle.stdin.end(),
      );
    }
    const stopForwarding = o.forwardSignals ? forwardSignals(handle) : () => undefined;
    try {
      const result = await handle.wait();
      await stdoutDone();
      return commandExit(result, o.timeoutS);
    } finally {
      stopForwarding();
    }
  } catch (e) {
    return commandFailed(e, argv);
  } finally {
    // Only a stdin we read from holds the process open (and touching it would create it).
    if (o.forwardStdin) process.stdin.destroy();
  }
}

/** Set once the command wrote to our stdout: only then is there anything to drain. */
let wroteStdout = false;

/** Resolves once what the command wrote to our stdout has been handed to the OS. */
function stdoutDone(): Promise<void> {
  return wroteStdout ? drained() : Promise.resolve();
}

/** Output straight to our own streams; a full pipe holds the command's output back. */
function writeOutput(stream: 'stdout' | 'stderr', chunk: Uint8Array): Promise<void> | void {
  if (stream === 'stdout') wroteStdout = true;
  const out = stream === 'stdout' ? process.stdout : process.stderr;
  if (!out.write(chunk)) return new Promise((resolve) => out.once('drain', () => resolve()));
}

/** The first SIGINT/SIGTERM goes to the command as is; the next kills it. */
function forwardSignals(handle: CommandHandle): () => void {
  let received = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    received += 1;
    const send = received > 1 ? 'SIGKILL' : signal === 'SIGINT' ? 'SIGINT' : 'SIGTERM';
    void handle.kill(send).catch(() => undefined);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
}
