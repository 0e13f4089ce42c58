/**
 * Shared by the image tests: a private FORKD_HOME per test, a minimal busybox root to build
 * test images from, and reading an ext4 image from the outside with e2fsprogs (debugfs,
 * e2fsck) — no mount, so no root needed.
 */
import type { TestContext } from 'node:test';
import {
  copyFile,
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { paths, type Paths } from '../../../src/config.js';
import { run } from '../../../src/util/exec.js';

/** A fresh FORKD_HOME removed when the test ends, pass or fail. */
export async function tempHome(t: TestContext): Promise<Paths> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-images-test-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return paths(dir);
}

/** What is under FORKD_HOME/images (including dot entries such as staging dirs). */
export async function imagesDirEntries(p: Paths): Promise<string[]> {
  return readdir(p.images).catch(() => []);
}

/** The bytes of `path` inside the image (debugfs dump keeps binary content intact). */
export async function ext4Read(image: string, path: string): Promise<Buffer> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-debugfs-'));
  try {
    await run('debugfs', ['-R', `dump ${path} ${join(dir, 'out')}`, image]);
    return await readFile(join(dir, 'out'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Type, permission bits, owner and (for a symlink) target of `path` inside the image. */
export async function ext4Stat(
  image: string,
  path: string,
): Promise<{ type: string; mode: number; uid: number; target?: string }> {
  const { stdout } = await run('debugfs', ['-R', `stat ${path}`, image]);
  const m = /Type:\s*(\S+)\s+Mode:\s*([0-7]+)/.exec(stdout);
  if (!m?.[1] || !m[2]) throw new Error(`${path} not found in ${image}`);
  return {
    type: m[1],
    mode: parseInt(m[2], 8),
    uid: Number(/User:\s*(\d+)/.exec(stdout)?.[1]),
    target: /Fast link dest:\s*"(.*)"/.exec(stdout)?.[1],
  };
}

/** e2fsck -fn: a full read-only check; throws when the filesystem has errors. */
export async function ext4Check(image: string): Promise<void> {
  await run('e2fsck', ['-fn', image]);
}

/**
 * A minimal root in `dir`: the host's static busybox with `applets` linked in /bin, an
 * empty /app, and users root and app (uid 1000, group app, home `appHome`).
 */
export async function busyboxRoot(dir: string, applets: string[], appHome: string): Promise<void> {
  await mkdir(join(dir, 'bin'), { recursive: true });
  await copyFile('/bin/busybox', join(dir, 'bin/busybox'));
  for (const a of applets) await symlink('busybox', join(dir, 'bin', a));
  await mkdir(join(dir, 'app'));
  await mkdir(join(dir, 'etc'));
  await writeFile(
    join(dir, 'etc/passwd'),
    `root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:${appHome}:/bin/sh\n`,
  );
  await writeFile(join(dir, 'etc/group'), 'root:x:0:\napp:x:1000:\n');
}
