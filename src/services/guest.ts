/**
 * The guest side every sandbox boots: the distribution's cloud kernel (extracted from its
 * Debian package into FORKD_HOME/kernels) and forkd's initramfs (the static agent as /init
 * plus the virtio modules it loads). `setupGuest` makes them; `locateGuest` finds them.
 */
import { createHash } from 'node:crypto';
import {
  copyFile,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rename,
  rm,
  symlink,
  writeFile,
  readlink,
} from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { repoRoot, type Paths } from '../config.js';
import { ForkdError } from '../errors.js';
import { run } from '../util/exec.js';

/** Files a VM boot needs. */
export interface GuestAssets {
  kernel: string;
  initramfs: string;
  kernelVersion: string;
  agent: string;
}

/** Module files the agent loads, in dependency order (relative to the kernel's tree). */
export const GUEST_MODULES = [
  'drivers/virtio/virtio_ring.ko',
  'drivers/virtio/virtio.ko',
  'drivers/virtio/virtio_mmio.ko',
  'drivers/char/virtio_console.ko',
  'drivers/block/virtio_blk.ko',
  'net/core/failover.ko',
  'drivers/net/net_failover.ko',
  'drivers/net/virtio_net.ko',
  'drivers/char/hw_random/virtio-rng.ko',
];

const KERNEL_PACKAGE = 'linux-image-cloud-amd64';

/** The agent binary built from agent/ in this checkout. */
export function builtAgentPath(): string {
  return join(repoRoot(), 'agent', 'build', 'forkd-agent');
}

/** Find the current kernel and initramfs; `setup_required` says how to make them. */
export async function locateGuest(p: Paths): Promise<GuestAssets> {
  const current = join(p.kernels, 'current');
  let version: string;
  try {
    version = await readlink(current);
  } catch {
    throw setupRequired(`no guest kernel under ${p.kernels}`);
  }
  const dir = join(p.kernels, version);
  const assets: GuestAssets = {
    kernel: join(dir, 'vmlinuz'),
    initramfs: join(dir, 'initramfs.cpio'),
    kernelVersion: version,
    agent: join(dir, 'forkd-agent'),
  };
  for (const f of [assets.kernel, assets.initramfs, assets.agent]) {
    if (!existsSync(f)) throw setupRequired(`missing guest file ${f}`);
  }
  return assets;
}

function setupRequired(what: string): ForkdError {
  return new ForkdError(
    'setup_required',
    `${what}: run \`forkd setup\` (or the README's setup command)`,
  );
}

/**
 * Install the guest kernel (from a local .deb, else downloaded with apt) and build the
 * initramfs around the agent. Idempotent: a kernel already present is kept, the initramfs
 * is rebuilt only when the agent binary changed.
 */
export async function setupGuest(
  p: Paths,
  opts: { kernelDeb?: string; agent?: string; force?: boolean } = {},
  onProgress: (line: string) => void = () => undefined,
): Promise<GuestAssets> {
  await mkdir(p.kernels, { recursive: true });
  const version = await installKernel(p, opts, onProgress);
  const dir = join(p.kernels, version);
  const agent = opts.agent ?? builtAgentPath();
  if (!existsSync(agent))
    throw setupRequired(`agent binary ${agent} not built (run \`make -C agent\`)`);
  const agentHash = await sha256(agent);
  const stamp = join(dir, 'initramfs.sha256');
  const current = await readFile(stamp, 'utf8').catch(() => '');
  if (opts.force || current.trim() !== agentHash || !existsSync(join(dir, 'initramfs.cpio'))) {
    onProgress(`building initramfs for ${version}`);
    await buildInitramfs(dir, agent);
    await writeFile(stamp, agentHash + '\n');
  }
  await pointCurrent(p, version);
  return locateGuest(p);
}

async function installKernel(
  p: Paths,
  opts: { kernelDeb?: string; force?: boolean },
  onProgress: (line: string) => void,
): Promise<string> {
  const existing = await readlink(join(p.kernels, 'current')).catch(() => undefined);
  if (
    existing &&
    !opts.force &&
    !opts.kernelDeb &&
    existsSync(join(p.kernels, existing, 'vmlinuz'))
  ) {
    onProgress(`guest kernel ${existing} already installed`);
    return existing;
  }
  const work = await mkdtemp(join(tmpdir(), 'forkd-kernel-'));
  try {
    const deb = opts.kernelDeb ?? (await downloadKernelDeb(work, onProgress));
    onProgress(`extracting ${deb}`);
    const tree = join(work, 'x');
    await run('dpkg-deb', ['-x', deb, tree]);
    return await stageKernel(p, tree);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

async function downloadKernelDeb(
  work: string,
  onProgress: (line: string) => void,
): Promise<string> {
  const { stdout } = await run('apt-cache', ['depends', KERNEL_PACKAGE]);
  const pkg = /Depends:\s*(linux-image-\S+)/.exec(stdout)?.[1];
  if (!pkg) {
    throw setupRequired(`apt does not know ${KERNEL_PACKAGE}; run \`apt-get update\``);
  }
  onProgress(`downloading ${pkg} with apt`);
  await run('apt-get', ['download', '-o', 'APT::Sandbox::User=root', pkg], { cwd: work });
  const deb = (await readdir(work)).find((f) => f.startsWith(pkg) && f.endsWith('.deb'));
  if (!deb) throw new ForkdError('internal', `apt-get download ${pkg} produced no .deb`);
  return join(work, deb);
}

/** Copy vmlinuz and the modules forkd needs from an extracted kernel package. */
async function stageKernel(p: Paths, tree: string): Promise<string> {
  const boot = join(tree, 'boot');
  const vmlinuz = (await readdir(boot)).find((f) => f.startsWith('vmlinuz-'));
  if (!vmlinuz) throw new ForkdError('setup_required', 'the kernel package has no /boot/vmlinuz-*');
  const version = vmlinuz.slice('vmlinuz-'.length);
  const modRoot = join(tree, 'lib', 'modules', version, 'kernel');
  const staging = join(p.kernels, `.staging-${version}-${process.pid}`);
  await rm(staging, { recursive: true, force: true });
  await mkdir(join(staging, 'modules'), { recursive: true });
  try {
    await copyFile(join(boot, vmlinuz), join(staging, 'vmlinuz'));
    const config = (await readdir(boot)).find((f) => f.startsWith('config-'));
    if (config) await copyFile(join(boot, config), join(staging, 'config'));
    for (const m of GUEST_MODULES) await copyModule(join(modRoot, m), join(staging, 'modules'));
    const dest = join(p.kernels, version);
    await rm(dest, { recursive: true, force: true });
    await rename(staging, dest);
  } catch (e) {
    await rm(staging, { recursive: true, force: true });
    throw e;
  }
  return version;
}

async function copyModule(src: string, destDir: string): Promise<void> {
  const name = src.split('/').pop() as string;
  if (existsSync(src)) return copyFile(src, join(destDir, name));
  for (const [ext, tool] of [
    ['.xz', 'xz'],
    ['.zst', 'zstd'],
  ] as const) {
    if (!existsSync(src + ext)) continue;
    await run('sh', ['-c', `${tool} -dc "$1" > "$2"`, 'sh', src + ext, join(destDir, name)]);
    return;
  }
  throw new ForkdError('setup_required', `the guest kernel lacks module ${name}`);
}

/** initramfs = newc cpio of: /init (the agent), /lib/modules/*.ko, /etc/forkd/modules. */
async function buildInitramfs(kernelDir: string, agent: string): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), 'forkd-initramfs-'));
  try {
    for (const d of ['lib/modules', 'etc/forkd', 'proc', 'sys', 'dev', 'newroot', 'tmp']) {
      await mkdir(join(root, d), { recursive: true });
    }
    await copyFile(agent, join(root, 'init'));
    await run('chmod', ['0755', join(root, 'init')]);
    await copyFile(agent, join(kernelDir, 'forkd-agent'));
    const names = GUEST_MODULES.map((m) => m.split('/').pop() as string);
    for (const n of names)
      await copyFile(join(kernelDir, 'modules', n), join(root, 'lib/modules', n));
    await writeFile(join(root, 'etc/forkd/modules'), names.join('\n') + '\n');
    const out = join(kernelDir, 'initramfs.cpio');
    const tmp = `${out}.tmp`;
    await run('sh', [
      '-c',
      `cd "$1" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 > "$2"`,
      'sh',
      root,
      tmp,
    ]);
    await rename(tmp, out);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

async function pointCurrent(p: Paths, version: string): Promise<void> {
  const link = join(p.kernels, 'current');
  const tmp = `${link}.tmp-${process.pid}`;
  await rm(tmp, { force: true });
  await symlink(version, tmp);
  await rename(tmp, link);
}

async function sha256(file: string): Promise<string> {
  return createHash('sha256')
    .update(await readFile(file))
    .digest('hex');
}
