/**
 * Disk full, told apart from every other failure: a long operation (snapshot create,
 * branch, fork, image build, pull) that runs out of space on the filesystem holding
 * FORKD_HOME fails with `disk_full` and what is left, not with `internal` or a misleading
 * "size too small". The ENOSPC may reach us as a Node errno error, or only as the text of a
 * tool's or QEMU's message, or as nothing more than a write that stopped: hence the
 * statfs check as the last word.
 */
import { statfs } from 'node:fs/promises';
import { ForkdError, isForkdError } from '../errors.js';

const NO_SPACE =
  /\bENOSPC\b|No space left on device|\bEDQUOT\b|Disk quota exceeded|\bSQLITE_FULL\b|database or disk is full/i;
/** Below this much free space (or free inodes) a failed write is taken to be disk full. */
const NEARLY_FULL_BYTES = 4 * 1024 * 1024;
const NEARLY_FULL_INODES = 16;
const FREE_SPACE_HINT =
  'free space there (forkd rmi old snapshots, forkd image prune) or move FORKD_HOME to a larger disk, then retry';

/** Free bytes and inodes of the filesystem holding `dir` (undefined if it cannot be asked). */
export async function freeSpace(
  dir: string,
): Promise<{ bytes: number; inodes: number } | undefined> {
  try {
    const s = await statfs(dir);
    return { bytes: s.bavail * s.bsize, inodes: s.ffree };
  } catch {
    return undefined;
  }
}

type Free = { bytes: number; inodes: number } | undefined;

const nearlyFull = (free: Free) =>
  free !== undefined && (free.bytes < NEARLY_FULL_BYTES || free.inodes < NEARLY_FULL_INODES);

const describeFree = (free: Free) =>
  free === undefined
    ? 'free space unknown'
    : `${(free.bytes / 1048576).toFixed(1)} MiB and ${free.inodes} inodes free`;

/** The filesystem holding `path` is (nearly) out of space or inodes. */
export async function hostIsFull(path: string): Promise<boolean> {
  return nearlyFull(await freeSpace(path));
}

/**
 * Refuse to start `what` (a fork, a branch, a snapshot create) on a nearly full
 * filesystem: a child needs less than a MiB to start, so with a little left it would start
 * and then stall on its first disk write (QEMU stops a guest whose disk cannot grow), and a
 * capture would only fail after it stopped its source. Nothing is made before this check.
 */
export async function refuseWhenFull(dir: string, what: string): Promise<void> {
  const free = await freeSpace(dir);
  if (!nearlyFull(free)) return;
  throw new ForkdError(
    'disk_full',
    `${what} was refused: the filesystem holding FORKD_HOME is full (${describeFree(free)}, ` +
      `under ${NEARLY_FULL_BYTES / 1048576} MiB or ${NEARLY_FULL_INODES} inodes): ${FREE_SPACE_HINT}`,
    { free_bytes: free?.bytes ?? null, free_inodes: free?.inodes ?? null },
  );
}

function saysNoSpace(e: unknown): boolean {
  if (!e || typeof e !== 'object') return false;
  const err = e as { code?: unknown; message?: unknown; details?: unknown; cause?: unknown };
  if (['ENOSPC', 'EDQUOT', 'SQLITE_FULL'].includes(String(err.code))) return true;
  if (typeof err.message === 'string' && NO_SPACE.test(err.message)) return true;
  if (err.details && NO_SPACE.test(JSON.stringify(err.details))) return true;
  return err.cause !== undefined && err.cause !== e && saysNoSpace(err.cause);
}

/**
 * `e` as `disk_full` when it came from the filesystem holding `dir` running out of space
 * (after the caller undid what it wrote, so the free space reported is what is left); else
 * `e` itself. Catalog errors that say something else (a bad request, a missing image) stay.
 */
export async function asDiskFull(e: unknown, dir: string, what: string): Promise<unknown> {
  if (isForkdError(e, 'disk_full')) return e;
  if (
    isForkdError(e) &&
    // blob_invalid: a download whose file could not be written reads as "broke off".
    !['internal', 'guest_error', 'boot_failed', 'bad_request', 'blob_invalid'].includes(e.code)
  ) {
    return e;
  }
  const free = await freeSpace(dir);
  if (!saysNoSpace(e) && !nearlyFull(free)) return e;
  return diskFull(what, free);
}

/** The `disk_full` error for `what` ("snapshot create"), with what is free now. */
export function diskFull(what: string, free?: { bytes: number; inodes: number }): ForkdError {
  const left = free === undefined ? '' : ` (${(free.bytes / 1048576).toFixed(1)} MiB free now)`;
  return new ForkdError(
    'disk_full',
    `${what} ran out of disk space on the filesystem holding FORKD_HOME${left} and was undone: ` +
      FREE_SPACE_HINT,
    { free_bytes: free?.bytes ?? null, free_inodes: free?.inodes ?? null },
  );
}
