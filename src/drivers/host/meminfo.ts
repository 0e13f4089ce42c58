/**
 * The host's memory as the kernel counts it (/proc/meminfo): what a new allocation can get
 * without swapping (`MemAvailable`), for checks that refuse work up front rather than let
 * the OOM killer choose a victim halfway through.
 */
import { readFile } from 'node:fs/promises';

/** A `Key:   N kB` line of /proc/meminfo, in bytes (undefined when absent). */
export function meminfoField(text: string, key: string): number | undefined {
  const m = new RegExp(`^${key}:\\s+(\\d+) kB$`, 'm').exec(text);
  return m ? Number(m[1]) * 1024 : undefined;
}

/** Bytes the host can give without swapping; Infinity where the kernel does not say. */
export async function memAvailable(): Promise<number> {
  const text = await readFile('/proc/meminfo', 'utf8').catch(() => '');
  return meminfoField(text, 'MemAvailable') ?? Infinity;
}
