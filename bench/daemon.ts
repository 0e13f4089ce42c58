/**
 * A real `forkd daemon` (the built CLI) as a child process on a bench home, for the
 * benchmarks that measure through the REST API: ready once /healthz answers, stopped by
 * its pid (SIGTERM, SIGKILL after 15 s) so a failing run never leaves it behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Forkd } from '@forkd/sdk';
import type { BenchHome } from './home.js';

/** The built CLI, next to the compiled benchmarks. */
export const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));

export interface BenchDaemon {
  url: string;
  child: ChildProcess;
  output: () => string;
}

/** A shared host under heavy load (load average 200 seen) can take over 30 s to start Node. */
const READY_TIMEOUT_MS = 120_000;

const exited = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null;

/** `forkd daemon ARGS` on the bench home, ready once /healthz answers. */
export async function startDaemon(home: BenchHome, args: string[] = []): Promise<BenchDaemon> {
  const child = spawn(process.execPath, [CLI, 'daemon', ...args], {
    env: home.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (chunk: Buffer) => (output = (output + chunk.toString('utf8')).slice(-64 * 1024));
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const daemon = {
    url: `unix:${join(home.dir, 'run', 'forkd.sock')}`,
    child,
    output: () => output,
  };
  const forkd = new Forkd({ url: daemon.url });
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (exited(child)) throw new Error(`forkd daemon exited: ${output}`);
    try {
      await forkd.health({ signal: AbortSignal.timeout(1000) });
      return daemon;
    } catch {
      if (Date.now() > deadline) {
        await stopDaemon(daemon);
        throw new Error(`forkd daemon not ready in ${READY_TIMEOUT_MS / 1000} s: ${output}`);
      }
      await sleep(100);
    }
  }
}

/** SIGTERM by pid, SIGKILL after 15 s. */
export async function stopDaemon(d: BenchDaemon): Promise<void> {
  if (exited(d.child)) return;
  const gone = new Promise((resolve) => d.child.once('exit', resolve));
  d.child.kill('SIGTERM');
  const timer = setTimeout(() => d.child.kill('SIGKILL'), 15_000);
  await gone;
  clearTimeout(timer);
}
