/**
 * Running host tools (qemu-img, mkfs.ext4, debootstrap…) with errors that name the tool
 * and carry its stderr, so a failure says what broke instead of "exit code 1".
 */
import { execFile, spawn } from 'node:child_process';
import { basename } from 'node:path';
import { ForkdError } from '../errors.js';

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
      file,
      args,
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
    if (opts.input !== undefined) child.stdin?.end(opts.input);
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
    const child = spawn(file, args, {
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
    child.stdout.on('data', feed);
    child.stderr.on('data', feed);
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
  if (err.code === 'ENOENT') {
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
