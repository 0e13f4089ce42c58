/** Runs the built `forkd` CLI as a user would, capturing its exit code and both streams. */
import { spawn } from 'node:child_process';
import { join } from 'node:path';

export const CLI = join(process.cwd(), 'dist', 'src', 'cli', 'main.js');

export interface CliResult {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

/** Run `forkd ARGS…` with an environment and optional stdin bytes. */
export function forkd(
  args: string[],
  opts: { env: NodeJS.ProcessEnv; input?: Buffer | string },
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: opts.env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') }),
    );
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
  });
}
