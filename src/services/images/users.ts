/**
 * Who uses an image: the snapshots built from it (their disk chains end at its rootfs)
 * and the sandboxes running from it. Removing or replacing an image under them would
 * leave the snapshots unbootable or, worse, their disk layers reading a filesystem they
 * were not written over; so `image rm` and `image build --force` refuse while it has any.
 */
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { Store } from '../../store/db.js';
import { readManifest } from '../snapshots/files.js';

export interface ImageUsers {
  snapshots: string[];
  sandboxes: string[];
}

async function snapshotsOf(p: Paths, name: string): Promise<string[]> {
  const tags = (await readdir(p.snapshots).catch(() => [] as string[])).filter(
    (t) => !t.startsWith('.'),
  );
  const manifests = await Promise.all(tags.map((t) => readManifest(p, t).catch(() => undefined)));
  return manifests.filter((m) => m?.image === name).map((m) => m?.tag as string);
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
