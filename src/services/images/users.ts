/**
 * Who uses an image: the snapshots built from it (their disk chains end at its rootfs)
 * and the sandboxes running from it. Removing or replacing an image under them would
 * leave the snapshots unbootable or, worse, their disk layers reading a filesystem they
 * were not written over; so `image rm` and `image build --force` refuse while it has any.
 * Its boot snapshots are no such users: they are removed with it, and their sizes are
 * remembered in the new image for the daemon to capture again (boot-refresh.ts).
 */
import { existsSync } from 'node:fs';
import { readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { Store } from '../../store/db.js';
import { readManifest, type SnapshotManifest } from '../snapshots/files.js';

export interface ImageUsers {
  snapshots: string[];
  sandboxes: string[];
}

/** The manifests of every snapshot on disk of image `name`. */
async function manifestsOf(p: Paths, name: string): Promise<SnapshotManifest[]> {
  const tags = (await readdir(p.snapshots).catch(() => [] as string[])).filter(
    (t) => !t.startsWith('.'),
  );
  const manifests = await Promise.all(tags.map((t) => readManifest(p, t).catch(() => undefined)));
  return manifests.filter((m): m is SnapshotManifest => m?.image === name);
}

/** Snapshots of the image that keep it: a boot snapshot goes with its image instead. */
async function snapshotsOf(p: Paths, name: string): Promise<string[]> {
  return (await manifestsOf(p, name)).filter((m) => !m.boot).map((m) => m.tag);
}

/** The boot snapshots of image `name` (docs/snapshots.md "Boot snapshots"). */
export async function bootSnapshotsOf(p: Paths, name: string): Promise<SnapshotManifest[]> {
  return (await manifestsOf(p, name)).filter((m) => m.boot);
}

/**
 * Remove the boot snapshots of an image being removed or replaced (their disks layer on
 * its rootfs): rows first, then files. Only called once no sandbox of the image runs.
 */
export async function removeBootSnapshots(p: Paths, name: string): Promise<void> {
  const boots = await bootSnapshotsOf(p, name);
  if (boots.length === 0) return;
  const store = existsSync(p.db) ? Store.open(p.db) : undefined;
  try {
    for (const m of boots) {
      store?.snapshots.delete(m.tag);
      await rm(join(p.snapshots, m.tag), { recursive: true, force: true });
    }
  } finally {
    store?.close();
  }
}

/** The sizes of boot snapshots an image had before a rebuild, kept in its new directory. */
const WANTED = 'boot-wanted.json';

/** A boot snapshot's size: what the background refresh captures again (boot-refresh.ts). */
export interface BootSize {
  memory_mib: number;
  cpus: number;
  network: 'none' | 'nat';
}

/**
 * Before an image is replaced: write the sizes of its boot snapshots into the new image's
 * directory (`dir`, still staging), so the daemon captures them again for the new image.
 */
export async function rememberBootSizes(p: Paths, name: string, dir: string): Promise<void> {
  const sizes = (await bootSnapshotsOf(p, name)).map((m) => ({
    memory_mib: m.memory_mib,
    cpus: m.cpus,
    network: m.network ?? 'none',
  }));
  if (sizes.length > 0) await writeFile(join(dir, WANTED), JSON.stringify(sizes) + '\n');
}

/** The boot snapshot sizes image `name` is waiting for (none when it is not rebuilt). */
export async function wantedBootSizes(p: Paths, name: string): Promise<BootSize[]> {
  const text = await readFile(join(p.images, name, WANTED), 'utf8').catch(() => '[]');
  return JSON.parse(text) as BootSize[];
}

/** Forget what `wantedBootSizes` said (captured, or given up: the first start captures). */
export async function forgetWantedBootSizes(p: Paths, name: string): Promise<void> {
  await rm(join(p.images, name, WANTED), { force: true });
}

function sandboxesOf(p: Paths, name: string): string[] {
  if (!existsSync(p.db)) return [];
  const store = Store.open(p.db);
  try {
    return store.sandboxes
      .active()
      .filter((r) => r.image === name)
      .map((r) => r.id);
  } finally {
    store.close();
  }
}

export async function imageUsers(p: Paths, name: string): Promise<ImageUsers> {
  return { snapshots: await snapshotsOf(p, name), sandboxes: sandboxesOf(p, name) };
}

/** Throws `image_in_use`, naming the users, unless nothing uses image `name`. */
export async function assertImageUnused(p: Paths, name: string, doing: string): Promise<void> {
  const users = await imageUsers(p, name);
  const named = [
    ...users.snapshots.map((t) => `snapshot ${t}`),
    ...users.sandboxes.map((id) => `sandbox ${id}`),
  ];
  if (named.length === 0) return;
  const shown = named.slice(0, 5).join(', ') + (named.length > 5 ? `, … (${named.length})` : '');
  throw new ForkdError(
    'image_in_use',
    `cannot ${doing} image "${name}": ${shown} use it; remove those snapshots (\`forkd rmi\`) and kill those sandboxes first, or build under another name`,
    { image: name, ...users },
  );
}
