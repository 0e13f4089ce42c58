/**
 * `forkd tree [TAG]`: what came from what, as an indented tree — images, the snapshots made
 * from them, the sandboxes forked from each snapshot, and under each sandbox the snapshots
 * branched from it (and so on: branches of branches) — with every snapshot's and sandbox's
 * state; with TAG, only what came from that snapshot. Only live sandboxes are shown.
 *
 * The daemon's lineage gives a snapshot's disk parent: a second branch of one sandbox is
 * layered over its first, which would draw it under its sibling, and every branch would
 * hang beside its source instead of under it. So a branched snapshot is drawn under its
 * source sandbox while that runs, and once it is gone under the snapshot the source came
 * from. `--json` prints the nodes with the edges the tree is drawn from.
 */
import type { Command } from 'commander';
import { Forkd, ForkdError, Snapshot, type LineageNode, type SnapshotInfo } from '@forkd/sdk';
import { LINEAGE_NODE, toWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson } from './output.js';
import { parseName } from './parse.js';
import { LIVE_STATES } from './ps.js';

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('[tag]', 'only what came from this snapshot')
      .option('--json', 'machine-readable output (the flat list of nodes)'),
  ).action(action(tree));
}

async function tree(tag: string | undefined, flags: DaemonFlags): Promise<void> {
  if (tag !== undefined) parseName(tag, 'the tag');
  const config = clientConfig(flags);
  const [lineage, snapshots] = await Promise.all([
    new Forkd(config).lineage(),
    Snapshot.list(config),
  ]);
  const all = cameFrom(lineage.filter(shown), snapshots);
  const nodes = tag === undefined ? all : subtree(all, tag);
  if (flags.json) return printJson({ nodes: nodes.map((n) => toWire(LINEAGE_NODE, n)) });
  if (nodes.length === 0) {
    process.stderr.write('nothing yet: build an image with `forkd image build`\n');
    return;
  }
  process.stdout.write(treeLines(nodes).join('\n') + '\n');
}

/** Images and snapshots always; sandboxes while they live. */
function shown(n: LineageNode): boolean {
  return n.kind !== 'sandbox' || (LIVE_STATES as readonly string[]).includes(n.state);
}

type Edge = NonNullable<LineageNode['parent']>;

/** Every branched snapshot's edge replaced by what it came from (see the module comment). */
export function cameFrom(nodes: LineageNode[], snapshots: SnapshotInfo[]): LineageNode[] {
  const byTag = new Map(snapshots.map((s) => [s.tag, s]));
  const live = new Set(nodes.filter((n) => n.kind === 'sandbox').map((n) => n.id));
  return nodes.map((n) => {
    const info = n.kind === 'snapshot' ? byTag.get(n.id) : undefined;
    return info?.sourceSandbox ? { ...n, parent: origin(info, byTag, live) ?? n.parent } : n;
  });
}

/**
 * Where a branch came from: its source sandbox while it runs; else the snapshot its source
 * was forked from — up the disk chain past the source's own earlier branches — or the image
 * the source was booted from.
 */
function origin(
  s: SnapshotInfo,
  byTag: Map<string, SnapshotInfo>,
  live: Set<string>,
): Edge | undefined {
  const source = s.sourceSandbox;
  if (source && live.has(source)) return { kind: 'sandbox', id: source };
  let up = s.parent ? byTag.get(s.parent) : undefined;
  while (up && up.sourceSandbox === source) up = up.parent ? byTag.get(up.parent) : undefined;
  if (up) return { kind: 'snapshot', id: up.tag };
  return s.image ? { kind: 'image', id: s.image } : undefined;
}

const keyOf = (n: { kind: string; id: string }) => `${n.kind}:${n.id}`;

/** Nodes by the key of their parent, in the order the daemon listed them. */
function childrenOf(nodes: LineageNode[]): Map<string, LineageNode[]> {
  const present = new Set(nodes.map(keyOf));
  const children = new Map<string, LineageNode[]>();
  for (const n of nodes) {
    if (!n.parent || !present.has(keyOf(n.parent))) continue;
    children.set(keyOf(n.parent), [...(children.get(keyOf(n.parent)) ?? []), n]);
  }
  return children;
}

/** Snapshot `tag` and everything that came from it; snapshot_not_found when none. */
function subtree(nodes: LineageNode[], tag: string): LineageNode[] {
  const top = nodes.find((n) => n.kind === 'snapshot' && n.id === tag);
  if (!top) {
    throw new ForkdError('snapshot_not_found', `no snapshot "${tag}": see \`forkd snapshots\``, {
      tag,
    });
  }
  const children = childrenOf(nodes);
  const keep = new Set<string>();
  const walk = (n: LineageNode) => {
    keep.add(keyOf(n));
    for (const kid of children.get(keyOf(n)) ?? []) walk(kid);
  };
  walk(top);
  return nodes.filter((n) => keep.has(keyOf(n)));
}

/**
 * The nodes as tree lines, in the order the daemon listed them. A node whose parent is not
 * in the list (the top of a subtree) is a root, hung under its parent's name in brackets.
 */
function treeLines(nodes: LineageNode[]): string[] {
  const present = new Set(nodes.map(keyOf));
  const children = childrenOf(nodes);
  const lines: string[] = [];
  const walk = (n: LineageNode, lead: string, indent: string) => {
    lines.push(lead + label(n));
    const kids = children.get(keyOf(n)) ?? [];
    kids.forEach((kid, i) => {
      const last = i === kids.length - 1;
      walk(kid, indent + (last ? '└── ' : '├── '), indent + (last ? '    ' : '│   '));
    });
  };
  for (const root of nodes.filter((n) => !n.parent || !present.has(keyOf(n.parent)))) {
    if (!root.parent) walk(root, '', '');
    else {
      lines.push(`(${root.parent.kind} ${root.parent.id})`);
      walk(root, '└── ', '    ');
    }
  }
  return lines;
}

/** `snapshot b1 (ready)`; images have no state to show. */
function label(n: LineageNode): string {
  return n.kind === 'image' ? `image ${n.id}` : `${n.kind} ${n.id} (${n.state})`;
}
