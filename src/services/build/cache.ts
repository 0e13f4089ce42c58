/**
 * The build cache: every VM step's snapshot carries its key in the label `forkd.build.key`
 * (sha256 over the parent's key, the step's expanded text and state, and the digest of the
 * context files it copies), so a lookup is a scan of the snapshots' labels and the cache
 * needs no table of its own. Step snapshots are labelled `forkd.build=step` (`forkd
 * snapshots` hides them) and `prune` removes those nothing uses, leaves first.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { SnapshotManifest } from '../snapshots/files.js';
import { descendants } from '../snapshots/lineage.js';

export const KEY_LABEL = 'forkd.build.key';
export const KIND_LABEL = 'forkd.build';
/** The label value of a step's snapshot (hidden) and of a build's tagged result. */
export const STEP = 'step';
export const RESULT = 'result';

/** The next key of the chain. */
export function chainKey(parent: string, ...parts: string[]): string {
  const h = createHash('sha256').update(parent);
  for (const p of parts) h.update('\0').update(p);
  return h.digest('hex');
}

/** The newest ready step snapshot with this key, if any. */
export function lookup(manifests: Map<string, SnapshotManifest>, key: string): string | undefined {
  let best: SnapshotManifest | undefined;
  for (const m of manifests.values()) {
    if (m.labels[KEY_LABEL] !== key || m.labels[KIND_LABEL] !== STEP) continue;
    if (!best || m.created_at > best.created_at) best = m;
  }
  return best?.tag;
}

/** A fresh tag for a step's snapshot: `build-` and the key's start, unique. */
export function stepTag(key: string): string {
  return `build-${key.slice(0, 16)}-${randomBytes(3).toString('hex')}`;
}

/**
 * Step snapshots nothing uses, in an order they can be removed: no sandbox forked from
 * or layered on them, and no snapshot built on them but other unused step snapshots.
 */
export function unusedSteps(
  manifests: Map<string, SnapshotManifest>,
  inUse: (tag: string) => boolean,
): string[] {
  const steps = [...manifests.values()].filter((m) => m.labels[KIND_LABEL] === STEP);
  const removable = new Set<string>();
  let changed = true;
  while (changed) {
    changed = false;
    for (const m of steps) {
      if (removable.has(m.tag) || inUse(m.tag)) continue;
      const below = descendants(m.tag, manifests);
      if (below.every((t) => removable.has(t))) {
        removable.add(m.tag);
        changed = true;
      }
    }
  }
  // Deepest first: a snapshot goes before the one it is built on.
  const depth = (t: string): number => {
    const p = manifests.get(t)?.parent;
    return p ? 1 + depth(p) : 0;
  };
  return [...removable].sort((a, b) => depth(b) - depth(a));
}
