/**
 * The default offline image: the host's static busybox plus one symlink per applet and
 * the handful of /etc files a shell expects. Needs no network and no root.
 */
import { chmod, copyFile, mkdir, open, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { buildImage, type BuildOptions, type Progress } from './build.js';
import type { Image } from './store.js';

/** The image `forkd setup` builds and verbs use when none is named. */
export const DEFAULT_IMAGE = 'busybox';

/** Where Debian's busybox-static puts its binary. */
export const HOST_BUSYBOX = '/bin/busybox';

/** Directories of the image, with their modes (umask must not decide /tmp's sticky bit). */
const DIRS: ReadonlyArray<readonly [string, number]> = [
  ['bin', 0o755],
  ['sbin', 0o755],
  ['usr/bin', 0o755],
  ['usr/sbin', 0o755],
  ['etc', 0o755],
  ['root', 0o700],
  ['home', 0o755],
  ['tmp', 0o1777],
  ['var/tmp', 0o1777],
  ['var/log', 0o755],
  ['run', 0o755],
  ['proc', 0o555],
  ['sys', 0o555],
  ['dev', 0o755],
  ['mnt', 0o755],
  ['opt', 0o755],
];

/** The host busybox, checked to be static (a dynamic one would not run in the image). */
export async function hostBusybox(path = HOST_BUSYBOX): Promise<{ path: string; version: string }> {
  const missing = () =>
    new ForkdError(
      'setup_required',
      `${path} is missing or not a static binary: install busybox-static ` +
        '(`apt-get install busybox-static`), then run `forkd doctor`',
      { path },
    );
  if (!(await isStaticElf(path).catch(() => false))) throw missing();
  const { stdout } = await run(path, ['--help']);
  const version = /^BusyBox (v\S+)/m.exec(stdout)?.[1];
  if (!version) throw missing();
  return { path, version };
}

/** Build the busybox image (see module comment). */
export async function buildBusyboxImage(
  p: Paths,
  opts: BuildOptions,
  onProgress?: Progress,
): Promise<Image> {
  const busybox = await hostBusybox();
  return buildImage(
    p,
    opts,
    { kind: 'busybox', version: busybox.version },
    (root) => populate(root, busybox),
    onProgress,
  );
}

async function populate(root: string, busybox: { path: string; version: string }): Promise<void> {
  for (const [dir, mode] of DIRS) {
    await mkdir(join(root, dir), { recursive: true });
    await chmod(join(root, dir), mode);
  }
  await copyFile(busybox.path, join(root, 'bin/busybox'));
  await chmod(join(root, 'bin/busybox'), 0o755);
  const { stdout } = await run(busybox.path, ['--list-full']);
  for (const applet of stdout.split('\n').filter((a) => a && a !== 'bin/busybox')) {
    await mkdir(dirname(join(root, applet)), { recursive: true });
    await symlink('/bin/busybox', join(root, applet));
  }
  for (const [file, text] of Object.entries(etcFiles(busybox.version))) {
    await writeFile(join(root, file), text, { mode: 0o644 });
  }
}

/** Identity files every image forkd makes gets (the host pushes the real hostname later). */
export const BASE_ETC: Readonly<Record<string, string>> = {
  'etc/hostname': 'forkd\n',
  'etc/hosts': '127.0.0.1 localhost\n::1 localhost\n',
};

function etcFiles(version: string): Record<string, string> {
  const bare = version.replace(/^v/, '');
  return {
    ...BASE_ETC,
    'etc/passwd':
      'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n',
    'etc/group': 'root:x:0:\nnogroup:x:65534:\n',
    'etc/os-release':
      `NAME="forkd busybox"\nID=forkd-busybox\nVERSION_ID="${bare}"\n` +
      `PRETTY_NAME="forkd busybox (BusyBox ${version})"\n`,
  };
}

/**
 * A static ELF has no PT_INTERP program header. Reading the header ourselves avoids
 * depending on `file(1)`.
 */
export async function isStaticElf(path: string): Promise<boolean> {
  const fh = await open(path, 'r');
  try {
    const head = Buffer.alloc(64);
    await fh.read(head, 0, 64, 0);
    if (head.readUInt32BE(0) !== 0x7f454c46 || head[5] !== 1) return false; // ELF, little-endian
    const is64 = head[4] === 2;
    const phoff = is64 ? Number(head.readBigUInt64LE(32)) : head.readUInt32LE(28);
    const phentsize = head.readUInt16LE(is64 ? 54 : 42);
    const phnum = head.readUInt16LE(is64 ? 56 : 44);
    const table = Buffer.alloc(phentsize * phnum);
    await fh.read(table, 0, table.length, phoff);
    const PT_INTERP = 3;
    for (let i = 0; i < phnum; i++) {
      if (table.readUInt32LE(i * phentsize) === PT_INTERP) return false;
    }
    return phnum > 0;
  } finally {
    await fh.close();
  }
}
