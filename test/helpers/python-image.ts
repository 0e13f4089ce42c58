/**
 * The Debian image with python3, numpy and matplotlib that the eval tests and bench use:
 * built once into the set-up home by scripts/setup.sh (or here, on first use, if setup ran
 * before it was added: debootstrap then takes several minutes) and linked read-only into a
 * test home. A test home that needs this checkout's agent gets its own initramfs too.
 */
import { existsSync } from 'node:fs';
import { mkdir, readdir, readlink, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { paths } from '../../src/config.js';
import { setupGuest } from '../../src/services/guest.js';
import { buildDebianImage } from '../../src/services/images/index.js';
import { BASE_HOME, type TestHome } from './home.js';

export const PYTHON_IMAGE = 'forkd-test-python';
export const PYTHON_PACKAGES = ['python3', 'python3-numpy', 'python3-matplotlib'];

/** Link the Python image into `home`, building it in the base home first if missing. */
export async function linkPythonImage(home: TestHome): Promise<void> {
  const base = paths(BASE_HOME);
  const dir = join(base.images, PYTHON_IMAGE);
  if (!existsSync(join(dir, 'image.json'))) {
    process.stderr.write(`building the ${PYTHON_IMAGE} image (debootstrap, minutes)…\n`);
    await buildDebianImage(base, {
      name: PYTHON_IMAGE,
      suite: 'bookworm',
      packages: PYTHON_PACKAGES,
    });
  }
  await symlink(dir, join(home.paths.images, PYTHON_IMAGE));
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
