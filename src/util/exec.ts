/**
 * Running host tools (qemu-img, mkfs.ext4, debootstrap…) with errors that name the tool
 * and carry its stderr, so a failure says what broke instead of "exit code 1". Every tool
 * is started through forkd-tool-exec (native/tool-exec.c), so that it and its own children
 * die with this process: a daemon SIGKILLed mid-build leaves no tar or mkfs.ext4 running.
 */
import { existsSync } from 'node:fs';
import { execFile, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { basename, join } from 'node:path';
import { repoRoot } from '../config.js';
import { ForkdError } from '../errors.js';

export const TOOL_EXEC_BINARY =
  process.env.FORKD_TOOL_EXEC_BIN ?? join(repoRoot(), 'native', 'build', 'forkd-tool-exec');

/** Whether a tool's exit says forkd-tool-exec found no such program (it exits 127 saying so). */
export function toolMissing(code: unknown, stderr: string): boolean {
  return code === 127 && /^forkd-tool-exec: .*: not found$/m.test(stderr);
}

/** `file args` as launched: through forkd-tool-exec, bound to this process's life. */
function launched(file: string, args: string[]): [string, string[]] {
  return [TOOL_EXEC_BINARY, [String(process.pid), file, ...args]];
}

/** Spawn a tool the way {@link run} does (for callers that stream its output). */
export function spawnTool(file: string, args: string[], opts: SpawnOptions): ChildProcess {
  return spawn(...launched(file, args), opts);
}

export interface RunResult {
  stdout: string;
  stderr: string;
}

/** Run a tool to completion; throws `internal` (or `setup_required` when it is missing). */
export function run(
  file: string,
  args: string[],
  opts: {
    cwd?: string;
    env?: NodeJS.ProcessEnv;
    timeoutMs?: number;
    maxBuffer?: number;
    /** Written to the tool's stdin (e.g. an `nft -f -` script). */
    input?: string;
  } = {},
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      ...launched(file, args),
      {
        cwd: opts.cwd,
        env: opts.env,
        timeout: opts.timeoutMs ?? 0,
        maxBuffer: opts.maxBuffer ?? 64 * 1024 * 1024,
        encoding: 'utf8',
      },
      (err, stdout, stderr) => {
        if (!err) return resolve({ stdout, stderr });
        reject(toolError(file, args, err as NodeJS.ErrnoException, stderr));
      },
    );
    if (opts.input !== undefined) {
      // A tool that exits without reading its input (nsenter on a namespace gone) makes the
      // write fail with EPIPE; its exit status is the error, and an unheard stream error
      // would end the daemon.
      child.stdin?.on('error', () => undefined);
      child.stdin?.end(opts.input);
    }
  });
}

/** Like {@link run} but streams each output line to `onLine` (progress of long tools). */
export function runStreaming(
  file: string,
  args: string[],
  onLine: (line: string) => void,
  opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawnTool(file, args, {
      cwd: opts.cwd,
      env: opts.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let tail = '';
    const feed = (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      tail = (tail + text).slice(-4000);
      for (const line of text.split('\n')) if (line.trim()) onLine(line);
    };
    child.stdout!.on('data', feed);
    child.stderr!.on('data', feed);
    child.on('error', (err) => reject(toolError(file, args, err, tail)));
    child.on('close', (code, signal) => {
      if (code === 0) return resolve();
      const err = Object.assign(new Error(`exit ${code ?? signal}`), {
        code: code ?? undefined,
        signal,
      });
      reject(toolError(file, args, err as NodeJS.ErrnoException, tail));
    });
  });
}

function toolError(
  file: string,
  args: string[],
  err: NodeJS.ErrnoException,
  stderr: string,
): ForkdError {
  if (err.code === 'ENOENT' && !existsSync(TOOL_EXEC_BINARY)) {
    // The launcher itself is missing: the native helpers were never built.
    return new ForkdError(
      'setup_required',
      `${TOOL_EXEC_BINARY} is missing (needed to run ${basename(file)}): build forkd's native helpers with \`npm run build\``,
      { tool: TOOL_EXEC_BINARY },
    );
  }
  if (toolMissing(err.code, stderr)) {
    return new ForkdError(
      'setup_required',
      `${file} is not installed; run the setup command from the README, then \`forkd doctor\``,
      { tool: file },
    );
  }
  // A signal forkd did not send (no timeout of ours: `killed` unset): the OOM killer, a user.
  const signal = (err as { signal?: string | null; killed?: boolean }).signal;
  if (signal && !(err as { killed?: boolean }).killed) {
    const sub = args[0] && !args[0].startsWith('-') ? ` ${args[0]}` : '';
    return new ForkdError(
      'internal',
      `${basename(file)}${sub} was killed (${signal}) before it finished, by something outside ` +
        'forkd (the out-of-memory killer, a user)',
      { tool: file, args, signal },
    );
  }
  const last = stderr.trim().split('\n').slice(-5).join('\n');
  return new ForkdError('internal', `${file} failed: ${last || err.message}`, {
    tool: file,
    args,
  });
}
