/**
 * Phase marks for the benches that ask where a command's time goes (bench/run-phases.ts):
 * with `FORKD_PHASES=<file>` every `phase(name)` appends one line `<epoch ms> <pid> <name>`
 * to that file, from the CLI and the daemon alike, so one run's marks of both processes
 * merge into one timeline. Unset (always, outside a bench) it costs one property read.
 */
import { appendFileSync } from 'node:fs';

const FILE = process.env.FORKD_PHASES;

/** Wall-clock ms with sub-ms precision, comparable across processes. */
const now = (): number => performance.timeOrigin + performance.now();

/** Record that `name` was reached now (no-op unless FORKD_PHASES names a file). */
export function phase(name: string): void {
  if (FILE) write(now(), name);
}

function write(at: number, name: string): void {
  try {
    appendFileSync(FILE!, `${at.toFixed(2)} ${process.pid} ${name}\n`);
  } catch {
    // a bench's file gone: marks are best effort, never a failure of the command
  }
}

// The process's own start (before any module loaded), once per process that marks.
if (FILE) write(performance.timeOrigin, 'process start');
if (FILE) process.on('exit', () => write(now(), 'process exit'));
