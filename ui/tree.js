// The lineage graph: images → snapshots → branches → live sandboxes, drawn by cytoscape
// (its breadthfirst layout, roots at the images). `update` diffs the nodes against what is
// drawn, so a change adds or removes nodes without redrawing the rest, and lays the graph
// out again only when its shape changed.
import cytoscape from '/ui/vendor/cytoscape.mjs';

/** The graph's id of a lineage node (kinds have separate name spaces). */
export const nodeKey = (kind, id) => `${kind}:${id}`;

const STYLE = [
  {
    selector: 'node',
    style: {
      label: 'data(label)',
      'font-size': 10,
      'text-wrap': 'ellipsis',
      'text-max-width': 110,
      'text-valign': 'bottom',
      'text-margin-y': 4,
      color: '#1f2933',
      width: 26,
      height: 26,
      'border-width': 2,
      'border-color': '#fff',
    },
  },
  {
    selector: 'node[kind = "image"]',
    style: { shape: 'round-rectangle', 'background-color': '#7b8794' },
  },
  {
    selector: 'node[kind = "snapshot"]',
    style: { shape: 'hexagon', 'background-color': '#2f80ed' },
  },
  { selector: 'node[kind = "snapshot"][?branch]', style: { 'background-color': '#9b51e0' } },
  {
    selector: 'node[kind = "sandbox"]',
    style: { shape: 'ellipse', 'background-color': '#27ae60' },
  },
  {
    selector: 'node[tier = "paused"], node[tier = "hibernated"], node[tier = "halted"]',
    style: { 'background-color': '#f2994a' },
  },
  {
    selector: 'node[state = "starting"], node[state = "writing"]',
    style: { 'border-color': '#f2c94c', 'border-style': 'dashed' },
  },
  { selector: 'node[state = "failed"]', style: { 'background-color': '#eb5757' } },
  { selector: 'node:selected', style: { 'border-color': '#111', 'border-width': 3 } },
  {
    selector: 'edge',
    style: {
      width: 1.5,
      'line-color': '#bcccdc',
      'target-arrow-color': '#bcccdc',
      'target-arrow-shape': 'triangle',
      'curve-style': 'bezier',
    },
  },
];

/** Live sandboxes only: an ended one leaves the tree. */
const LIVE = new Set(['starting', 'running']);

export class LineageGraph {
  constructor(container, onSelect) {
    this.cy = cytoscape({
      container,
      style: STYLE,
      elements: [],
      minZoom: 0.2,
      maxZoom: 3,
      wheelSensitivity: 0.3,
    });
    this.cy.on('tap', 'node', (e) => onSelect(e.target.data()));
  }

  /**
   * Draw `nodes` (GET /v1/lineage) with `tiers` (sandbox id → tier) and `sources` (branch
   * snapshot tag → the sandbox it was branched from). Returns the nodes drawn, for the list.
   */
  update(nodes, tiers = new Map(), sources = new Map()) {
    const live = nodes.filter((n) => n.kind !== 'sandbox' || LIVE.has(n.state));
    const running = new Set(live.filter((n) => n.kind === 'sandbox').map((n) => n.id));
    // A branch hangs off the sandbox it was taken from while that sandbox lives.
    const shown = live.map((n) => {
      const from = n.kind === 'snapshot' ? sources.get(n.id) : undefined;
      return from && running.has(from)
        ? { ...n, parent: { kind: 'sandbox', id: from }, branch: true }
        : { ...n, branch: false };
    });
    const keys = new Set(shown.map((n) => nodeKey(n.kind, n.id)));
    let changed = false;
    this.cy.batch(() => {
      for (const el of this.cy.nodes()) {
        if (!keys.has(el.id())) {
          el.remove();
          changed = true;
        }
      }
      for (const n of shown) changed = this.upsert(n, tiers.get(n.id)) || changed;
      // Edges after every node: a branch's parent sandbox may come later in the list.
      for (const n of shown) changed = this.link(n, keys) || changed;
    });
    if (changed) this.layout();
    return shown;
  }

  /** Add or refresh one node; true when it is new. */
  upsert(n, tier) {
    const key = nodeKey(n.kind, n.id);
    const data = {
      id: key,
      kind: n.kind,
      name: n.id,
      state: n.state,
      tier: tier ?? '',
      branch: n.branch,
      label: n.kind === 'sandbox' && tier && tier !== 'running' ? `${n.id} (${tier})` : n.id,
    };
    const existing = this.cy.getElementById(key);
    if (existing.nonempty()) {
      existing.data(data);
      return false;
    }
    this.cy.add({ group: 'nodes', data });
    return true;
  }

  /** The edge from a node's parent, if the parent is drawn; true when it changed. */
  link(n, keys) {
    const parent = n.parent && nodeKey(n.parent.kind, n.parent.id);
    const key = nodeKey(n.kind, n.id);
    const id = `${parent}->${key}`;
    const stale = this.cy
      .getElementById(key)
      .incomers('edge')
      .filter((e) => e.id() !== id);
    stale.remove();
    if (!parent || !keys.has(parent) || this.cy.getElementById(id).nonempty())
      return stale.nonempty();
    this.cy.add({ group: 'edges', data: { id, source: parent, target: key } });
    return true;
  }

  layout() {
    const roots = this.cy.nodes().filter((n) => n.indegree() === 0);
    this.cy
      .layout({
        name: 'breadthfirst',
        directed: true,
        roots,
        spacingFactor: 1.4,
        padding: 30,
        animate: false,
      })
      .run();
    // A small tree is not blown up to fill the panel: labels stay readable.
    if (this.cy.zoom() > 1) {
      this.cy.zoom(1);
      this.cy.center();
    }
  }

  has(kind, id) {
    return this.cy.getElementById(nodeKey(kind, id)).nonempty();
  }

  select(kind, id) {
    this.cy.nodes().unselect();
    this.cy.getElementById(nodeKey(kind, id)).select();
  }
}
