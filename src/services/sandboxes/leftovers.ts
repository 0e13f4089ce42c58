/**
 * Removing what an ended sandbox leaves on the host: its QEMU (only a pid verified to be
 * that sandbox's QEMU is ever signalled) and its directory (sockets, overlay, logs).
 */
import { rm } from 'node:fs/promises';
import { killVerifiedQemu, readQemuPid } from '../../drivers/qemu/vm.js';
import { readTail } from './files.js';

/** End the sandbox's QEMU if one still runs (by recorded pid or its pidfile); remove its dir. */
export async function removeLeftovers(dir: string, pid?: number | null): Promise<void> {
  for (const candidate of new Set([pid ?? undefined, await readQemuPid(dir)])) {
    if (candidate !== undefined) await killVerifiedQemu(candidate, dir);
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
