/**
 * `forkd shell ID [-- CMD…]`: an interactive terminal in a running sandbox (a login shell,
 * or CMD), and the same engine behind `forkd exec -t`. Our terminal goes into raw mode, so
 * every key — Ctrl-C, Ctrl-D, Ctrl-Z — reaches the guest's terminal, which decides what it
 * means; window changes (SIGWINCH) are passed on; forkd exits with the shell's exit code.
 * The terminal is restored on every way out. A lost connection leaves the session running:
 * `forkd shell ID --attach pty-N` picks it up again; `forkd shell ID --list` shows the
 * sessions the sandbox holds.
 */
import { constants } from 'node:os';
import type { Command } from 'commander';
import { Forkd, Pty, PtyDetachedError, type ClientConfig, type PtyHandle } from '@forkd/sdk';
import { PTY_LOGIN_SHELL } from '../contract/rules.js';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { commandExit, EXIT } from './exit.js';
import { action, drained, printJson, printTable } from './output.js';
import { collect, parseEnv, parseSandboxId, parseUser, usage } from './parse.js';
import { envPrefix, shellCommand } from '../util/shell-words.js';

export { shellCommand };

interface ShellFlags extends DaemonFlags {
  env: string[];
  cwd?: string;
  user?: string;
  attach?: string;
  list?: boolean;
  json?: boolean;
}

/** What a terminal session runs, and where. */
export interface TerminalOptions {
  /** A shell command line; undefined for the sandbox's login shell. */
  cmd?: string;
  cwd?: string;
  user?: string;
  /** Reattach this session instead of opening one. */
  session?: string;
}

const SESSION = /^pty-[0-9]{1,15}$/;
const FALLBACK_SIZE = { cols: 80, rows: 24 };
/** Ctrl-D: what a piped stdin's end becomes on the guest's terminal. */
const EOF_KEY = '\x04';

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<id>', 'sandbox id')
      .argument('[command...]', 'run this instead of a login shell (after --)')
      .option('-e, --env <K=V>', 'environment variable (repeatable)', collect, [])
      .option('--cwd <dir>', 'working directory in the sandbox (absolute)')
      .option('--user <user>', 'user name or uid to run as')
      .option('--attach <session>', 'reattach a terminal session (pty-N) that is still running')
      .option('--list', "list the sandbox's terminal sessions instead of opening one")
      .option('--json', 'with --list: machine-readable output'),
  ).action(
    action(async (id: string, argv: string[], flags: ShellFlags) => {
      if (flags.list) return listSessions(id, argv, flags);
      if (flags.json) throw usage('--json goes with --list', { flag: '--json' });
      if (flags.attach !== undefined && !SESSION.test(flags.attach)) {
        throw usage(`--attach ${flags.attach} is not a session id like pty-1`, {
          flag: '--attach',
        });
      }
      if (
        flags.attach !== undefined &&
        (argv.length > 0 || flags.cwd || flags.user || flags.env.length)
      ) {
        throw usage(
          '--attach joins a running session: it takes no command, --cwd, --user or --env',
        );
      }
      const env = parseEnv(flags.env);
      const login = Object.keys(env).length > 0 ? envPrefix(env, PTY_LOGIN_SHELL) : undefined;
      return runTerminal(ptyOf(parseSandboxId(id), clientConfig(flags)), {
        cmd: argv.length > 0 ? shellCommand(argv, env) : login,
        cwd: parseCwd(flags.cwd),
        user: parseUser(flags.user),
        session: flags.attach,
      });
    }),
  );
}

/** `--list`: the sessions the sandbox holds, running or ended but not yet reaped. */
async function listSessions(id: string, argv: string[], flags: ShellFlags): Promise<void> {
  if (argv.length > 0 || flags.attach || flags.cwd || flags.user || flags.env.length) {
    throw usage('--list takes no command, --attach, --cwd, --user or --env');
  }
  const sessions = await ptyOf(parseSandboxId(id), clientConfig(flags)).list();
  if (flags.json) return printJson(sessions);
  printTable(
    ['SESSION', 'PID', 'STATE', 'ATTACHED', 'OUTPUT', 'AGE'],
    sessions.map((s) => [
      s.session,
      String(s.pid),
      s.exited ? 'exited' : 'running',
      s.attached ? 'yes' : 'no',
      `${s.offset} B`,
      `${Math.round(s.ageMs / 1000)}s`,
    ]),
  );
}

function parseCwd(cwd: string | undefined): string | undefined {
  if (cwd !== undefined && !cwd.startsWith('/')) {
    throw usage(`--cwd "${cwd}" must be an absolute path in the sandbox`, { flag: '--cwd' });
  }
  return cwd;
}

/** The terminals of sandbox `id`, without looking it up first (the upgrade answers 404). */
export function ptyOf(id: string, config: ClientConfig): Pty {
  return new Pty(new Forkd(config).transport, `/v1/sandboxes/${encodeURIComponent(id)}`);
}

function windowSize(): { cols: number; rows: number } {
  const out = process.stdout;
  return out.isTTY && out.columns > 0 && out.rows > 0
    ? { cols: Math.min(out.columns, 1000), rows: Math.min(out.rows, 1000) }
    : FALLBACK_SIZE;
}

/** Raw mode on our terminal, and the one function that undoes it (safe to call twice). */
function rawTerminal(): () => void {
  const stdin = process.stdin;
  if (!stdin.isTTY) return () => undefined;
  stdin.setRawMode(true);
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    stdin.setRawMode(false);
  };
  process.once('exit', restore);
  return restore;
}

/** Our keys to the session; a piped stdin's end is a Ctrl-D, as typed. */
function forwardInput(term: PtyHandle): () => void {
  const stdin = process.stdin;
  const onData = (chunk: Buffer) => term.sendInput(chunk);
  const onEnd = () => term.sendInput(EOF_KEY);
  stdin.on('data', onData);
  stdin.once('end', onEnd);
  return () => {
    stdin.off('data', onData);
    stdin.off('end', onEnd);
    stdin.pause();
    stdin.destroy();
  };
}

/** SIGWINCH on our terminal → the session's window size. */
function forwardResize(term: PtyHandle): () => void {
  const onResize = () => void term.resize(windowSize()).catch(() => undefined);
  process.stdout.on('resize', onResize);
  return () => process.stdout.off('resize', onResize);
}

/** Being hung up or terminated detaches (the session lives on), restoring the terminal. */
function onTermination(term: PtyHandle, restore: () => void): () => void {
  const handler = (signal: NodeJS.Signals) => {
    restore();
    term.disconnect();
    process.stderr.write(
      `\nforkd: detached from ${term.session}; reattach with --attach ${term.session}\n`,
    );
    process.exit(128 + constants.signals[signal]);
  };
  process.on('SIGHUP', handler);
  process.on('SIGTERM', handler);
  return () => {
    process.off('SIGHUP', handler);
    process.off('SIGTERM', handler);
  };
}

function writeOut(data: Uint8Array): void {
  process.stdout.write(data);
}

/**
 * Run a terminal session on this process's terminal; resolves with the exit code forkd
 * exits with (the command's own, 128+N for signal N).
 */
export async function runTerminal(pty: Pty, o: TerminalOptions): Promise<number> {
  const size = windowSize();
  const term =
    o.session === undefined
      ? await pty.create({ ...size, cmd: o.cmd, cwd: o.cwd, user: o.user, onData: writeOut })
      : await pty.connect(o.session, { ...size, since: 0, onData: writeOut });
  const restore = rawTerminal();
  const undo = [forwardInput(term), forwardResize(term), onTermination(term, restore)];
  try {
    const end = await term.wait();
    await drained();
    return commandExit({ ...end, timedOut: false }, undefined);
  } catch (e) {
    if (!(e instanceof PtyDetachedError)) throw e;
    restore();
    process.stderr.write(
      `\nforkd: ${e.message.replace(/sandbox\.pty\.connect\('([^']+)'\)/, '`forkd shell ID --attach $1`')}\n`,
    );
    return EXIT.failure;
  } finally {
    for (const u of undo) u();
    restore();
  }
}
