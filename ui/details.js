// The details panel of the selected node: what the REST API says of it (sizes, timings,
// labels, network, limits, where it came from) and its actions, each confirmed and each one
// REST call: fork N children of a snapshot; branch a sandbox (optionally forking N of the
// branch), pause/resume, kill it; open a terminal. A selected sandbox's CPU and memory are
// sampled every SAMPLE_MS into two small charts.
import { ago, bytes, confirmAction, facts, h, toast } from './dom.js';

const SAMPLE_MS = 2000;
const SAMPLES = 30;

export class DetailsPanel {
  constructor(el, { api, openTerminal, onChanged }) {
    Object.assign(this, { el, api, openTerminal, onChanged });
    this.selected = null;
    this.timer = undefined;
  }

  clear() {
    clearInterval(this.timer);
    this.selected = null;
    this.el.replaceChildren(h('p', { class: 'muted' }, 'Click a node for its details.'));
  }

  /** Show the node `{kind, name}` (the graph's data) and keep it fresh. */
  async show(node) {
    clearInterval(this.timer);
    this.selected = { kind: node.kind, name: node.name, samples: [] };
    await this.refresh();
    if (node.kind === 'sandbox') this.timer = setInterval(() => void this.refresh(), SAMPLE_MS);
  }

  /** Called when the tree changed: the selected node may be gone. */
  async refresh() {
    const sel = this.selected;
    if (!sel) return;
    try {
      const view = await this[`render_${sel.kind}`](sel);
      if (this.selected === sel) this.el.replaceChildren(...view);
    } catch (e) {
      if (this.selected !== sel) return;
      if (e.status === 404) return this.clear();
      this.el.replaceChildren(h('p', { class: 'error' }, e.message));
    }
  }

  async render_image(sel) {
    const img = await this.api.get(`/v1/images/${encodeURIComponent(sel.name)}`);
    return [
      h('h2', {}, 'image ', h('code', {}, img.name)),
      facts([
        ['size', bytes(img.size_bytes)],
        ['created', ago(img.created_at)],
        ['source', img.source ?? img.from ?? undefined],
      ]),
    ];
  }

  async render_snapshot(sel) {
    const s = await this.api.get(`/v1/snapshots/${encodeURIComponent(sel.name)}`);
    return [
      h('h2', {}, 'snapshot ', h('code', {}, s.tag)),
      facts([
        ['state', snapshotState(s)],
        [
          'from',
          s.source_sandbox ? `branch of sandbox ${s.source_sandbox}` : `image ${s.image ?? '—'}`,
        ],
        ['parent', s.parent ?? '—'],
        ['size', `${bytes(s.physical_bytes)} on disk (${bytes(s.logical_bytes)} logical)`],
        ['chain depth', s.depth],
        ['guest', `${s.memory_mib} MiB, ${s.cpus} cpu`],
        ['created', ago(s.created_at)],
        ['children', `${s.children_alive} running`],
        [
          'pool',
          s.pool.size
            ? `${s.pool.ready}/${s.pool.size} VMs ready${s.pool.prewarm ? ', pre-warmed' : ''}` +
              (s.pool.memory_bytes ? `, ${bytes(s.pool.memory_bytes)}` : '')
            : 'none',
        ],
        ['kernel', s.kernel],
        ['qemu', s.qemu],
      ]),
      h(
        'div',
        { class: 'actions' },
        h(
          'button',
          { onclick: () => this.fork(s.tag), 'data-action': 'fork', disabled: !s.bootable },
          'Fork…',
        ),
      ),
    ];
  }

  async render_sandbox(sel) {
    const sb = await this.api.get(`/v1/sandboxes/${encodeURIComponent(sel.id ?? sel.name)}`);
    if (sb.usage) sel.samples = [...sel.samples, { t: Date.now(), ...sb.usage }].slice(-SAMPLES);
    const tier = sb.tier ?? 'running';
    const live = sb.state === 'running';
    return [
      h('h2', {}, 'sandbox ', h('code', {}, sb.id)),
      facts([
        ['state', sb.state],
        ['tier', tier],
        ['from', sb.snapshot ? `snapshot ${sb.snapshot}` : `image ${sb.image}`],
        ['parent', sb.parent ?? undefined],
        ['memory', `${sb.memory_mib} MiB`],
        ['cpus', sb.cpus],
        ['created', ago(sb.created_at)],
        ['expires', sb.expires_at ? ago(sb.expires_at).replace(' ago', '') : 'never'],
        ['network', sb.network ? networkText(sb.network) : undefined],
        ['limits', sb.limits ? limitsText(sb.limits) : undefined],
        [
          'labels',
          Object.entries(sb.labels ?? {})
            .map(([k, v]) => `${k}=${v}`)
            .join(', ') || '—',
        ],
      ]),
      charts(sel.samples),
      h(
        'div',
        { class: 'actions' },
        h(
          'button',
          { disabled: !live, 'data-action': 'terminal', onclick: () => this.openTerminal(sb.id) },
          'Terminal',
        ),
        h(
          'button',
          { disabled: !live, 'data-action': 'branch', onclick: () => this.branch(sb.id) },
          'Branch…',
        ),
        h(
          'button',
          { disabled: !live, 'data-action': 'fork', onclick: () => this.branch(sb.id, true) },
          'Fork…',
        ),
        ...this.parkButtons(sb, tier, live),
        h(
          'button',
          { class: 'danger', 'data-action': 'kill', onclick: () => this.kill(sb.id) },
          'Kill…',
        ),
      ),
    ];
  }

  /** Pause / resume, where the daemon has them (PAUSE.md); none otherwise. */
  parkButtons(sb, tier, live) {
    if (!('tier' in sb)) return [];
    return tier === 'running'
      ? [
          h(
            'button',
            { disabled: !live, 'data-action': 'pause', onclick: () => this.park(sb.id, 'pause') },
            'Pause…',
          ),
        ]
      : [
          h(
            'button',
            { 'data-action': 'resume', onclick: () => this.park(sb.id, 'resume') },
            'Resume…',
          ),
        ];
  }

  /** Runs one confirmed action: its REST call, a toast, and a refresh. */
  async act(label, call) {
    try {
      const result = await call();
      toast(label(result));
      this.onChanged();
      await this.refresh();
    } catch (e) {
      toast(`${e.code ?? 'error'}: ${e.message}`, true);
    }
  }

  async fork(tag) {
    const v = await confirmAction(
      `Fork sandboxes from snapshot ${tag}?`,
      [{ name: 'n', label: 'how many', type: 'number', value: '1', min: 1 }],
      'Fork',
    );
    if (!v) return;
    const n = Number(v.n);
    await this.act(
      (r) =>
        `forked ${r.sandboxes.length} of ${n}` +
        (r.failed?.length ? `, ${r.failed.length} failed` : ''),
      () => this.api.post('/v1/sandboxes', { snapshot: tag, n }),
    );
  }

  /** Branch `id` into a new snapshot; with `fork`, also N children of it. */
  async branch(id, fork = false) {
    const fields = [
      { name: 'tag', label: 'snapshot tag (empty: generated)', placeholder: 'optional' },
    ];
    if (fork) fields.push({ name: 'n', label: 'children', type: 'number', value: '2', min: 1 });
    const text = fork
      ? `Branch sandbox ${id} and fork children of the branch? It keeps running.`
      : `Branch sandbox ${id} into a new snapshot? It keeps running.`;
    const v = await confirmAction(text, fields, fork ? 'Branch and fork' : 'Branch');
    if (!v) return;
    const body = { ...(v.tag ? { tag: v.tag } : {}), ...(fork ? { fork: Number(v.n) } : {}) };
    await this.act(
      (r) =>
        `branched into ${r.snapshot.tag} (paused ${Math.round(r.pause_ms)} ms)` +
        (r.children ? `, ${r.children.sandboxes.length} children` : ''),
      () => this.api.post(`/v1/sandboxes/${encodeURIComponent(id)}/branch`, body),
    );
  }

  async park(id, verb) {
    if (
      !(await confirmAction(
        `${verb === 'pause' ? 'Pause' : 'Resume'} sandbox ${id}?`,
        [],
        verb === 'pause' ? 'Pause' : 'Resume',
      ))
    )
      return;
    await this.act(
      (r) => `${id} is ${r.tier}`,
      () =>
        // resume takes no body; pause takes an optional one
        this.api.request('POST', `/v1/sandboxes/${encodeURIComponent(id)}/${verb}`),
    );
  }

  async kill(id) {
    if (!(await confirmAction(`Kill sandbox ${id}? Its memory and disk are lost.`, [], 'Kill')))
      return;
    await this.act(
      () => `killed ${id}`,
      () => this.api.delete(`/v1/sandboxes/${encodeURIComponent(id)}`),
    );
  }
}

/** "nat, internet except 10.0.0.0/8" and the like. */
function networkText({ mode, egress: e }) {
  if (mode === 'none' || !e) return mode;
  if (e.none) return `${mode}, no egress`;
  const allow = e.allow_out.length ? ` + ${e.allow_out.join(' ')}` : '';
  const deny = e.deny_out.length ? ` except ${e.deny_out.join(' ')}` : '';
  return `${mode}, ${e.allow_internet ? 'internet' : 'allow-list only'}${allow}${deny}`;
}

function limitsText(l) {
  const parts = [];
  if (l.memory_bytes) parts.push(`memory ${bytes(l.memory_bytes)}`);
  if (l.cpu) parts.push(`cpu ${l.cpu}`);
  if (l.pids) parts.push(`pids ${l.pids}`);
  return parts.join(', ') || 'none';
}

/** CPU (% of one core, between samples) and memory, as two sparklines. */
function charts(samples) {
  if (samples.length < 2) return h('p', { class: 'muted' }, 'sampling CPU and memory…');
  const cpu = samples
    .slice(1)
    .map(
      (s, i) => (100 * (s.cpu_seconds - samples[i].cpu_seconds)) / ((s.t - samples[i].t) / 1000),
    );
  const mem = samples.map((s) => s.memory_bytes);
  return h(
    'div',
    { class: 'charts' },
    chart('CPU', cpu, `${cpu.at(-1).toFixed(0)} %`),
    chart('memory', mem, bytes(mem.at(-1))),
  );
}

function chart(label, values, now) {
  const W = 140;
  const H = 32;
  const max = Math.max(...values, 1e-9);
  const points = values
    .map(
      (v, i) =>
        `${((i / Math.max(values.length - 1, 1)) * W).toFixed(1)},${(H - (v / max) * (H - 2)).toFixed(1)}`,
    )
    .join(' ');
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('class', 'spark');
  const line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
  line.setAttribute('points', points);
  svg.append(line);
  return h('figure', {}, h('figcaption', {}, `${label} `, h('strong', {}, now)), svg);
}

/** A snapshot's state, and for one that cannot be forked why and what to do (as the CLI). */
function snapshotState(s) {
  const why = s.reason ? `: ${s.reason}` : '';
  if (s.state === 'failed') return `failed${why}; remove it with forkd rmi ${s.tag}`;
  if (s.state === 'writing') return `writing${why}`;
  return s.bootable ? s.state : `${s.state} (not bootable${why})`;
}
