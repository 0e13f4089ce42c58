/**
 * Lineage: what came from what. Images → snapshots (a branch's parent is the snapshot its
 * source's disk layered on) → live sandboxes, drawn from the published manifests and the
 * running sandboxes; plus the chain walks (ancestors, descendants) that snapshot info,
 * remove and compact use.
 */
import type { LineageT, SandboxT } from '../../contract/schemas.js';
import type { SnapshotManifest } from './files.js';

type Node = LineageT['nodes'][number];

/** Snapshots built on `tag`, deepest first. */
export function descendants(tag: string, all: Map<string, SnapshotManifest>): string[] {
  const list = [...all.values()];
  const walk = (t: string): string[] =>
    list.filter((m) => m.parent === t).flatMap((m) => [...walk(m.tag), m.tag]);
  return walk(tag);
}

/** Parent, grandparent, … of a manifest (a parent no longer published ends the list). */
export function ancestors(m: SnapshotManifest, all: Map<string, SnapshotManifest>): string[] {
  const out: string[] = [];
  let parent = m.parent;
  while (parent && !out.includes(parent)) {
    out.push(parent);
    parent = all.get(parent)?.parent ?? null;
  }
  return out;
}

function parentOf(snapshot: string | null, image: string | null): Node['parent'] {
  if (snapshot) return { kind: 'snapshot', id: snapshot };
  return image ? { kind: 'image', id: image } : null;
}

/**
 * Every image, snapshot and live sandbox with its parent edge; with `tag`, only that
 * snapshot's subtree (the caller checked that it exists).
 */
export function lineageOf(
  manifests: Map<string, SnapshotManifest>,
  sandboxes: SandboxT[],
  tag?: string,
): LineageT {
  const nodes: Node[] = [];
  const keep = tag ? new Set([tag, ...descendants(tag, manifests)]) : undefined;
  const images = new Set<string>();
  for (const m of manifests.values()) {
    if (keep && !keep.has(m.tag)) continue;
    if (!m.parent && m.image) images.add(m.image);
    const parent = parentOf(m.parent, m.image);
    nodes.push({ kind: 'snapshot', id: m.tag, parent, state: 'ready', created_at: m.created_at });
  }
  for (const sb of sandboxes) {
    if (sb.state !== 'running' && sb.state !== 'starting') continue;
    if (keep && !(sb.snapshot && keep.has(sb.snapshot))) continue;
    if (!sb.snapshot && sb.image) images.add(sb.image);
    const parent = parentOf(sb.snapshot, sb.image);
    nodes.push({ kind: 'sandbox', id: sb.id, parent, state: sb.state, created_at: sb.created_at });
  }
  if (!keep) {
    for (const name of images)
      nodes.unshift({ kind: 'image', id: name, parent: null, state: 'ready', created_at: '' });
  }
  return { nodes };
}
