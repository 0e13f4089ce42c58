/**
 * `mkdir -p` that tells why a directory could not be made. Node's recursive mkdir answers
 * ENOENT when the last directory cannot be created for want of an inode (ENOSPC; checked on
 * a tmpfs with none left), so a fork on a filesystem out of inodes failed as "no such file or
 * directory" instead of `disk_full` whenever other children had freed inodes by the time the
 * failure was looked at. The parents are made recursively, the directory itself plainly.
 */
import { mkdir, stat } from 'node:fs/promises';
import { dirname } from 'node:path';

export async function makeDir(dir: string, mode = 0o700): Promise<void> {
  await mkdir(dirname(dir), { recursive: true, mode });
  try {
    await mkdir(dir, { mode });
  } catch (e) {
    const isDir = await stat(dir).then(
      (s) => s.isDirectory(),
      () => false,
    );
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST' || !isDir) throw e;
  }
}
