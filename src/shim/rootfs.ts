/**
 * The root of a task that names no snapshot: its container's image, as a forkd image
 * (docs/kubernetes.md "Pods and tasks without a snapshot"). The image is named by the chain ID of
 * the image's layers — the parent of the container's snapshot, as containerd's snapshots
 * service reports it — so it is content-addressed: every container of the same layers, by
 * any tag or in any namespace, gets the same image, and the daemon's image store is the
 * cache (the shim keeps nothing). On a miss the shim mounts containerd's rootfs mounts on
 * the bundle's `rootfs` (the image's layers under the container's still empty upper dir),
 * the daemon builds the image from that directory (its boot snapshot too, so the next
 * sandbox of it forks), and the mount goes again.
 */
import { Forkd, isForkdError } from '@forkd/sdk';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { grpcCall } from './grpc.js';
import { CODE, TtrpcError } from './ttrpc.js';

const run = promisify(execFile);

/** The prefix of the images made from containers' roots. */
export const ROOTFS_IMAGE_PREFIX = 'rootfs-';

/** One of containerd's rootfs mounts (`task.Mount`). */
export interface Mount {
  type: string;
  source: string;
  options: string[];
}

/** containerd's gRPC socket and the namespace of the shim's tasks. */
export interface Containerd {
  address: string;
  namespace: string;
}

/**
 * The chain ID of the image layers task `id`'s root is made of (`sha256:…`): the parent of
 * its container's snapshot. Undefined for a container with no snapshot (`ctr run --rootfs`)
 * or one made from no image.
 */
export async function rootfsChainId(c: Containerd, id: string): Promise<string | undefined> {
  const { container } = await grpcCall<{
    container: { snapshotter: string; snapshot_key: string } | null;
  }>(
    c.address,
    c.namespace,
    '/containerd.services.containers.v1.Containers/Get',
    ['containers.GetContainerRequest', { id }],
    'containers.GetContainerResponse',
  );
  if (!container?.snapshot_key || !container.snapshotter) return undefined;
  const { info } = await grpcCall<{ info: { parent: string } | null }>(
    c.address,
    c.namespace,
    '/containerd.services.snapshots.v1.Snapshots/Stat',
    [
      'snapshots.StatSnapshotRequest',
      { snapshotter: container.snapshotter, key: container.snapshot_key },
    ],
    'snapshots.StatSnapshotResponse',
  );
  return info?.parent || undefined;
}

/** The forkd image name of chain ID `chainId`: the prefix and as much of its hex as fits. */
export function rootfsImageName(chainId: string): string {
  const hex = chainId.replace(/^sha256:/, '');
  if (!/^[0-9a-f]{64}$/.test(hex)) {
    throw new TtrpcError(CODE.invalidArgument, `containerd gave no sha256 chain ID: ${chainId}`);
  }
  return ROOTFS_IMAGE_PREFIX + hex.slice(0, 63 - ROOTFS_IMAGE_PREFIX.length);
}

/** Makes (once) and finds the forkd images of containers' roots. */
export class RootfsImages {
  /** Images being built by this shim, so two tasks of one image build it once. */
  private readonly building = new Map<string, Promise<string>>();
  private readonly forkd = new Forkd();

  constructor(private readonly log: (line: string) => void) {}

  /**
   * The forkd image of a container whose layers have chain ID `chainId`, its rootfs given
   * by `mounts` for bundle `bundle`: the cached one, else built now.
   */
  async image(chainId: string, mounts: Mount[], bundle: string): Promise<string> {
    const name = rootfsImageName(chainId);
    let pending = this.building.get(name);
    if (!pending) {
      pending = this.findOrBuild(name, mounts, bundle).finally(() => this.building.delete(name));
      this.building.set(name, pending);
    }
    return pending;
  }

  private async findOrBuild(name: string, mounts: Mount[], bundle: string): Promise<string> {
    const found = await this.forkd.images.get(name).catch((e: unknown) => {
      if (isForkdError(e, 'image_not_found')) return undefined;
      throw e;
    });
    if (found) {
      this.log(`image ${name}: cached`);
      return name;
    }
    const dir = join(bundle, 'rootfs');
    await mountAll(mounts, dir);
    try {
      this.log(`image ${name}: importing the container's root`);
      // A cache entry: the daemon removes it once no pod has used it for a while.
      await this.forkd.images.create({ name, fromDir: dir, cache: true });
    } catch (e) {
      // Another shim (another namespace) made it meanwhile: the same layers, the same image.
      if (!isForkdError(e, 'name_taken')) throw e;
    } finally {
      await unmountAll(mounts, dir);
    }
    return name;
  }
}

/** Mount containerd's rootfs mounts on `dir`, as runc's shim does. */
async function mountAll(mounts: Mount[], dir: string): Promise<void> {
  if (mounts.length === 0) {
    throw new TtrpcError(CODE.invalidArgument, `containerd gave no rootfs mounts for ${dir}`);
  }
  for (const [i, m] of mounts.entries()) {
    const options = m.options.length ? ['-o', m.options.join(',')] : [];
    try {
      await run('mount', ['-t', m.type, ...options, m.source, dir]);
    } catch (e) {
      await unmountAll(mounts.slice(0, i), dir);
      const why = (e as { stderr?: string }).stderr?.trim() || (e as Error).message;
      throw new TtrpcError(CODE.internal, `cannot mount the container's root on ${dir}: ${why}`);
    }
  }
}

/**
 * Unmount what a lost shim left mounted on bundle `bundle`'s `rootfs` (it died importing
 * the image): `delete` calls this, so a killed shim leaves no mount behind.
 */
export async function unmountLeft(bundle: string): Promise<void> {
  const dir = join(bundle, 'rootfs');
  const mounts = await readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  // mountinfo's 5th field is the mount point (octal escapes for spaces: none in a bundle).
  const n = mounts.split('\n').filter((l) => l.split(' ')[4] === dir).length;
  for (let i = 0; i < n; i++) await run('umount', [dir]).catch(() => undefined);
}

/** Undo mountAll's `mounts` on `dir`, last first. */
async function unmountAll(mounts: Mount[], dir: string): Promise<void> {
  for (let i = 0; i < mounts.length; i++) await run('umount', [dir]).catch(() => undefined);
}
