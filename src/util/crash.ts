/**
 * Test-only crash points, so recovery tests can kill the daemon at an exact step instead of
 * guessing with timers. With FORKD_CRASH_FILE set, `crashPoint(name)` SIGKILLs the process
 * when that file names the point, and `failPoint(name)` throws there instead; the file is
 * removed first, so each arming fires once (a restarted daemon does not die again unless
 * re-armed). Unset, it costs one env lookup.
 */
import { readFileSync, rmSync } from 'node:fs';

/** Whether the crash file names `name`; disarms it if so. */
function fires(name: string): boolean {
  const file = process.env.FORKD_CRASH_FILE;
  if (!file) return false;
  let armed: string;
  try {
    armed = readFileSync(file, 'utf8').trim();
  } catch {
    return false;
  }
  if (armed !== name) return false;
  rmSync(file, { force: true });
  return true;
}

export function crashPoint(name: string): void {
  if (fires(name)) process.kill(process.pid, 'SIGKILL');
}

export function failPoint(name: string): void {
  if (fires(name)) throw new Error(`injected failure at ${name}`);
}
