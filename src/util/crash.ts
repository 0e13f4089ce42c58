/**
 * Test-only crash points, so recovery tests can kill the daemon at an exact step instead of
 * guessing with timers. With FORKD_CRASH_FILE set, `crashPoint(name)` SIGKILLs the process
 * when that file names the point; the file is removed first, so each arming fires once (a
 * restarted daemon does not die again unless re-armed). Unset, it costs one env lookup.
 */
import { readFileSync, rmSync } from 'node:fs';

export function crashPoint(name: string): void {
  const file = process.env.FORKD_CRASH_FILE;
  if (!file) return;
  let armed: string;
  try {
    armed = readFileSync(file, 'utf8').trim();
  } catch {
    return;
  }
  if (armed !== name) return;
  rmSync(file, { force: true });
  process.kill(process.pid, 'SIGKILL');
}
