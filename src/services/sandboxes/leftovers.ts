/**
 * Removing what an ended sandbox leaves on the host: its QEMU (only a pid verified to be
 * that sandbox's QEMU is ever signalled) and its directory (sockets, overlay). Its console
 * log is moved out first into `FORKD_HOME/logs/`, so `forkd logs` of a stopped or dead
 * sandbox still answers, until the daemon forgets the sandbox's row.
 */
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { readTail } from './files.js';
import { vmm } from '../vmm.js';

/** End the sandbox's QEMU if one still runs (by recorded pid or its pidfile); remove its dir. */
export async function removeLeftovers(dir: string, pid?: number | null): Promise<void> {
  for (const candidate of new Set([pid ?? undefined, await vmm().readPid(dir)])) {
    if (candidate !== undefined) await vmm().killVerified(candidate, dir);
  }
  await rm(dir, { recursive: true, force: true });
}

/** The last non-empty console line, for a dead sandbox's reason (its dir is removed). */
export async function lastConsoleLine(consolePath: string): Promise<string | undefined> {
  const text = await readTail(consolePath, 4096);
  const lines = text
    .replace(/\r/g, '')
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  return lines.at(-1)?.slice(0, 200);
}

/** Where an ended sandbox's console log is kept. */
export function keptLogPath(home: string, id: string): string {
  return join(home, 'logs', `${id}.console.log`);
}

/** Moves the console log out of a sandbox's dir before the dir is removed (none: nothing). */
export async function keepConsoleLog(home: string, id: string, dir: string): Promise<void> {
  await mkdir(join(home, 'logs'), { recursive: true, mode: 0o700 });
  await rename(vmm().filesOf(dir).console, keptLogPath(home, id)).catch(
    (e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
    },
  );
}

/** Removes the kept logs of sandboxes that `known` no longer knows. */
export async function forgetLogs(home: string, known: (id: string) => boolean): Promise<void> {
  const dir = join(home, 'logs');
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const id = name.replace(/\.console\.log$/, '');
    if (!known(id)) await rm(join(dir, name), { force: true });
  }
}
