/**
 * Test-only crash points, so recovery tests can kill the daemon at an exact step instead of
 * guessing with timers. With FORKD_CRASH_FILE set, `crashPoint(name)` SIGKILLs the process
 * when that file names the point, and `failPoint(name)` throws there instead; the file is
 * removed first, so each arming fires once (a restarted daemon does not die again unless
 * re-armed). `holdPoint(name)`, armed as `hold:NAME`, waits there instead until the test
 * removes `FORKD_CRASH_FILE.held` (which it writes with a detail, e.g. a QEMU's pid), so a
 * test can act at that exact step (kill that QEMU) in a process it shares with the service.
 * Unset, each costs one env lookup.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

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

/** How long a hold point waits for its test before it goes on by itself. */
const HOLD_MAX_MS = 120_000;

export async function holdPoint(name: string, detail = ''): Promise<void> {
  if (!fires(`hold:${name}`)) return;
  const held = `${process.env.FORKD_CRASH_FILE}.held`;
  writeFileSync(held, detail);
  for (const until = Date.now() + HOLD_MAX_MS; existsSync(held) && Date.now() < until;) {
    await sleep(20);
  }
}
