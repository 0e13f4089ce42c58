/**
 * The Debian images the eval tests and bench use: python3 with numpy and matplotlib, and
 * nodejs for the Node contexts. scripts/setup.sh builds both into the set-up home (minutes
 * of debootstrap each), so a test never builds one: a missing image fails the test at once,
 * naming setup.sh. Either is linked read-only into a test home. A test home that needs this
 * checkout's agent gets its own initramfs too.
 */
import { existsSync } from 'node:fs';
import { mkdir, readdir, readlink, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { paths } from '../../src/config.js';
import { setupGuest } from '../../src/services/guest.js';
import { BASE_HOME, type TestHome } from './home.js';

export const PYTHON_IMAGE = 'forkd-test-python';
export const NODE_IMAGE = 'forkd-test-node';

/** Link a test image of the set-up home into `home`. */
export async function linkTestImage(
  home: TestHome,
  name: typeof PYTHON_IMAGE | typeof NODE_IMAGE,
): Promise<void> {
  const base = paths(BASE_HOME);
  const dir = join(base.images, name);
  if (!existsSync(join(dir, 'image.json'))) {
    throw new Error(`no ${name} image in ${BASE_HOME}: run scripts/setup.sh (it builds it)`);
  }
  await symlink(dir, join(home.paths.images, name));
}

/**
 * Give `home` a private kernels dir whose initramfs carries this checkout's agent (the
 * shared one may have been built from another checkout): the kernel files are linked.
 */
export async function privateGuest(home: TestHome): Promise<void> {
  const shared = paths(BASE_HOME).kernels;
  const version = await readlink(join(shared, 'current'));
  await rm(home.paths.kernels, { force: true });
  const dir = join(home.paths.kernels, version);
  await mkdir(dir, { recursive: true });
  for (const f of await readdir(join(shared, version))) {
    if (f === 'vmlinuz' || f === 'config' || f === 'modules') {
      await symlink(join(shared, version, f), join(dir, f));
    }
  }
  await symlink(version, join(home.paths.kernels, 'current'));
  await setupGuest(home.paths);
}
