/**
 * Eager boot snapshots (docs/images.md "The boot snapshot, captured at build"): right after
 * `image build`, `image pull`, `image import`, `from-image` and `unpack` make an image, its
 * boot snapshot for the default size is captured, so not even the first start of it boots a
 * kernel. The image is what was asked for: a capture that fails is a warning, never the
 * verb's failure, and the first start captures instead.
 */
import type { BootKey } from './boot.js';

/** What a capture reports: the tag, whether it was made now, its key (the size it is for). */
export interface Prepared {
  tag: string;
  captured: boolean;
  captureMs: number;
  key: BootKey;
}

/** One line of a capture's progress, as the verb shows it. */
export type Say = (message: string) => void;

/** What a capture answers: its tag, and its size (and how long it took) in words. */
export interface Ready {
  tag: string;
  detail: string;
}

/** A capture's answer in words (boot-start.ts's and boot-restore.ts's `Prepared`). */
export function ready(b: Prepared): Ready {
  const how = b.captured ? `captured in ${b.captureMs} ms` : 'already there';
  return { tag: b.tag, detail: `${describeSize(b.key)}; ${how}` };
}

/**
 * Capture the boot snapshot of `image` through `prepare` with progress on `say`; answers
 * the warnings (empty when it is there). `prepare` is the daemon's (`BootStarts.prepare`,
 * or its route from the CLI) or this process's (`captureBootSnapshotHere`, no daemon).
 */
export async function eagerBootSnapshot(
  image: string,
  prepare: (onProgress: Say) => Promise<Ready>,
  say: Say,
): Promise<string[]> {
  say(`capturing the boot snapshot of image ${image} (skip with --no-boot-snapshot)`);
  try {
    const b = await prepare((m) => say(`  ${m}`));
    say(`boot snapshot ${b.tag} of image ${image} ready (${b.detail})`);
    return [];
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    const warning = `no boot snapshot of image ${image} (${why}): its first start captures one`;
    say(`warning: ${warning}`);
    return [warning];
  }
}

/** `256 MiB, 1 vCPU, network nat`. */
export function describeSize(k: Pick<BootKey, 'memory_mib' | 'cpus' | 'network'>): string {
  return `${k.memory_mib} MiB, ${k.cpus} vCPU${k.cpus === 1 ? '' : 's'}, network ${k.network}`;
}
