/**
 * Pack archives with GNU tar and zstd: sparse members (`--sparse`, holes found with
 * SEEK_HOLE, so a hole stays a hole and a written page of zeros stays written — a memory
 * diff depends on that), fixed owners and times so the same files always give the same
 * bytes (a pushed file's blob digest is then stable and a registry dedupes it).
 */
import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { ForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { sha256File } from '../snapshots/files.js';
import { packInvalid, type PackFile } from './manifest.js';

const ZSTD = 'zstd -q -3 -T0';
const DETERMINISTIC = [
  '--sparse',
  '--format=gnu',
  '--mtime=@0',
  '--owner=0',
  '--group=0',
  '--numeric-owner',
];

/** Members relative to a directory (validated pack paths: none starts with `-`). */
export interface MemberGroup {
  dir: string;
  members: string[];
}

/** Write the groups' members, in that order, as a zstd tar at `out`. */
export async function writeArchive(groups: MemberGroup[], out: string): Promise<void> {
  const names = groups.flatMap((g) => ['-C', g.dir, ...g.members]);
  await run('tar', [...DETERMINISTIC, '-I', ZSTD, '-cf', out, ...names]);
}

/** One member's bytes (the manifest, which a pack holds first: tar stops after it). */
export async function readMember(archive: string, member: string): Promise<string | undefined> {
  const args = ['-I', 'zstd -q', '-xOf', archive, '--occurrence=1', '--', member];
  return run('tar', args).then(
    (r) => r.stdout,
    () => undefined,
  );
}

/**
 * Extract exactly `members` into `dir` (never a name the manifest does not list, so no link
 * or path of the archive reaches outside), sparse files kept sparse.
 */
export async function extractMembers(archive: string, dir: string, members: string[]) {
  try {
    await run('tar', [
      '-I',
      'zstd -q',
      '-xSf',
      archive,
      '-C',
      dir,
      '--no-same-owner',
      '--no-same-permissions',
      '--',
      ...members,
    ]);
  } catch (e) {
    throw packInvalid(`the archive could not be read: ${(e as Error).message.split('\n')[0]}`);
  }
}

/**
 * Each listed file extracted under `dir` must be a plain file of its recorded size and
 * sha256; `blob_invalid` names the first that is not.
 */
export async function verifyExtracted(dir: string, files: PackFile[]): Promise<void> {
  for (const f of files) {
    const path = join(dir, f.path);
    const st = await lstat(path).catch(() => undefined);
    if (!st)
      throw packInvalid(`the pack lacks ${f.path}, which its manifest lists`, { file: f.path });
    if (!st.isFile() || st.nlink !== 1) {
      throw packInvalid(`${f.path} in the pack is not a plain file`, { file: f.path });
    }
    if (st.size !== f.size || (await sha256File(path)) !== f.sha256) {
      throw corrupt(f, st.size);
    }
  }
}

function corrupt(f: PackFile, size: number): ForkdError {
  const why = size === f.size ? 'its sha256 differs' : `${size} bytes, expected ${f.size}`;
  return new ForkdError(
    'blob_invalid',
    `${f.path} does not match the pack manifest (${why}): the pack is corrupt; nothing was installed`,
    { file: f.path },
  );
}
