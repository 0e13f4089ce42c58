/**
 * `forkd tree [TAG]`: the lineage as an indented tree — images, the snapshots made from
 * them, the sandboxes forked from each snapshot and the snapshots branched on it — with
 * every snapshot's and sandbox's state; with TAG, only that snapshot's subtree. Only live
 * sandboxes are shown. `--json` prints the daemon's flat list (`{nodes}`, each with its
 * parent edge), which is what the tree is built from.
 */
import type { Command } from 'commander';
import { Forkd, type LineageNode } from '@forkd/sdk';
import { LINEAGE_NODE, toWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson } from './output.js';
import { LIVE_STATES } from './ps.js';

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('[tag]', "only this snapshot's subtree")
      .option('--json', 'machine-readable output (the flat list of nodes)'),
  ).action(action(tree));
}

async function tree(tag: string | undefined, flags: DaemonFlags): Promise<void> {
  const nodes = (await new Forkd(clientConfig(flags)).lineage({ tag })).filter(shown);
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

const keyOf = (n: { kind: string; id: string }) => `${n.kind}:${n.id}`;

/**
 * The nodes as tree lines, in the order the daemon listed them. A node whose parent is not
 * in the list (the top of a subtree) is a root, hung under its parent's name in brackets.
 */
function treeLines(nodes: LineageNode[]): string[] {
  const present = new Set(nodes.map(keyOf));
  const children = new Map<string, LineageNode[]>();
  const roots: LineageNode[] = [];
  for (const n of nodes) {
    if (n.parent && present.has(keyOf(n.parent))) {
      const siblings = children.get(keyOf(n.parent)) ?? [];
      children.set(keyOf(n.parent), [...siblings, n]);
    } else roots.push(n);
  }
  const lines: string[] = [];
  const walk = (n: LineageNode, lead: string, indent: string) => {
    lines.push(lead + label(n));
    const kids = children.get(keyOf(n)) ?? [];
    kids.forEach((kid, i) => {
      const last = i === kids.length - 1;
      walk(kid, indent + (last ? '└── ' : '├── '), indent + (last ? '    ' : '│   '));
    });
  };
  for (const root of roots) {
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
