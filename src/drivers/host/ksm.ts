/**
 * The kernel's same-page merging (KSM, /sys/kernel/mm/ksm): what state it is in, and
 * turning it on at the scan rate forkd advises when the daemon merges sandboxes' memory
 * (`--merge-memory`; docs/idle.md). KSM is host-wide: ksmd scans only the processes that
 * opted in (forkd-qemu-exec's PR_SET_MEMORY_MERGE), but merges across all of them.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const KSM_DIR = process.env.FORKD_KSM_DIR ?? '/sys/kernel/mm/ksm';

/** The scan rate forkd sets: bench/density.ts measured what it merges and what ksmd costs. */
export const KSM_ADVICE = { pages_to_scan: 1000, sleep_millisecs: 50 } as const;

export interface KsmState {
  /** Whether ksmd runs (`run` = 1). */
  running: boolean;
  pagesToScan: number;
  sleepMs: number;
  /** Pages that are mapped by more than one process through a merged page. */
  pagesSharing: number;
  /** Merged pages themselves (each saves pagesSharing / pagesShared copies). */
  pagesShared: number;
}

async function knob(name: string): Promise<number> {
  return Number((await readFile(join(KSM_DIR, name), 'utf8')).trim());
}

/** KSM's state, or undefined when the kernel has none (CONFIG_KSM off). */
export async function readKsm(): Promise<KsmState | undefined> {
  try {
    const names = ['run', 'pages_to_scan', 'sleep_millisecs', 'pages_sharing', 'pages_shared'];
    const [run, pagesToScan, sleepMs, pagesSharing, pagesShared] = (await Promise.all(
      names.map(knob),
    )) as [number, number, number, number, number];
    return { running: run === 1, pagesToScan, sleepMs, pagesSharing, pagesShared };
  } catch {
    return undefined;
  }
}

/**
 * Start ksmd at the advised rate if it is off (a running ksmd keeps the rate its admin
 * chose). Returns what it did, for the daemon's log; throws when not permitted (not root).
 */
export async function enableKsm(): Promise<'started' | 'already running' | 'unavailable'> {
  const state = await readKsm();
  if (!state) return 'unavailable';
  if (state.running) return 'already running';
  await writeFile(join(KSM_DIR, 'pages_to_scan'), String(KSM_ADVICE.pages_to_scan));
  await writeFile(join(KSM_DIR, 'sleep_millisecs'), String(KSM_ADVICE.sleep_millisecs));
  await writeFile(join(KSM_DIR, 'run'), '1');
  return 'started';
}
