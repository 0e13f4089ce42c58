/**
 * A private FORKD_HOME per benchmark run: a temp dir whose kernels and images are symlinks
 * into the set-up home (FORKD_HOME, /var/lib/forkd as root), so a benchmark never touches
 * the real home's database, sandboxes or snapshots. `cleanup()` ends any QEMU still
 * running under the temp dir (by pid, found through /proc) and removes the dir.
 */
import { mkdtemp, mkdir, readdir, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { forkdHome, paths, type Paths } from '../src/config.js';

export interface BenchHome {
  dir: string;
  paths: Paths;
  /** process.env with FORKD_HOME pointing at the temp home (for a daemon child process). */
  env: NodeJS.ProcessEnv;
  /** End QEMUs left under the home and remove it. Safe to call twice. */
  cleanup(): Promise<void>;
}

/** Make a temp home sharing the set-up home's kernels and the named images. */
export async function makeBenchHome(images: string[] = ['busybox']): Promise<BenchHome> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-bench-'));
  const p = paths(dir);
  const base = paths(forkdHome());
  try {
    await mkdir(p.images, { recursive: true });
    await symlink(base.kernels, p.kernels);
    for (const image of images) await symlink(join(base.images, image), join(p.images, image));
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    dir,
    paths: p,
    env: { ...process.env, FORKD_HOME: dir },
    cleanup: async () => {
      await killQemusUnder(dir);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Safety net: SIGKILL the QEMU processes whose command line mentions `dir`. */
async function killQemusUnder(dir: string): Promise<void> {
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const cmd = await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '');
    if (!cmd.startsWith('qemu-system') || !cmd.includes(dir)) continue;
    try {
      process.kill(Number(name), 'SIGKILL');
    } catch {
      // already gone
    }
  }
}
