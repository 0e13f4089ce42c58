// The web UI's entry: the token prompt (the token lives in sessionStorage, so it is gone
// when the tab closes), the pages (#/tree, #/doctor, #/bench), and the live lineage tree:
// every change event of GET /v1/events reloads the lineage (coalesced) and redraws.
import { Api, ApiError } from './api.js';
import { ago, h } from './dom.js';
import { DetailsPanel } from './details.js';
import { renderBench, renderDoctor } from './pages.js';
import { TerminalPanel } from './terminal.js';
import { LineageGraph } from './tree.js';

const TOKEN_KEY = 'forkd.token';
const $ = (id) => document.getElementById(id);

/** Handles for tests and the console. */
window.forkd = {};

/** `forkd ui` opens /ui#token=…: take it into the session and out of the address bar. */
function tokenFromUrl() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  history.replaceState(null, '', location.pathname + '#/tree');
}

async function signIn(token) {
  const api = new Api(token);
  await api.get('/v1/lineage'); // a wrong token fails here, before anything is shown
  return api;
}

function showLogin(message) {
  $('app').hidden = $('nav').hidden = $('logout').hidden = $('live').hidden = true;
  $('login').hidden = false;
  $('login-error').hidden = !message;
  $('login-error').textContent = message ?? '';
  $('token').focus();
}

class App {
  constructor(api) {
    this.api = api;
    this.terminal = new TerminalPanel({
      panel: $('terminal-panel'),
      mount: $('terminal'),
      title: $('terminal-title'),
      status: $('terminal-status'),
      close: $('terminal-close'),
    });
    this.details = new DetailsPanel($('details'), {
      api,
      openTerminal: (id) => this.terminal.open(id, api.token),
      onChanged: () => this.reload(),
    });
    this.graph = new LineageGraph($('graph'), (node) => {
      this.graph.select(node.kind, node.name);
      void this.details.show(node);
    });
    window.forkd.cy = this.graph.cy;
    this.pending = undefined;
  }

  start() {
    $('login').hidden = true;
    $('app').hidden = $('nav').hidden = $('logout').hidden = $('live').hidden = false;
    this.stopEvents = this.api.events(
      () => this.reload(),
      (up) => {
        $('live').textContent = up ? '● live' : '○ reconnecting';
        $('live').className = up ? 'live up' : 'live';
        if (up) void this.reload(); // changes missed while away
      },
    );
    window.addEventListener('hashchange', () => this.route());
    this.route();
  }

  stop() {
    this.stopEvents?.();
    this.terminal.close();
    this.details.clear();
  }

  route() {
    const page = /^#\/(\w+)/.exec(location.hash)?.[1] ?? 'tree';
    for (const p of ['tree', 'doctor', 'bench']) $(`page-${p}`).hidden = p !== page;
    for (const a of document.querySelectorAll('nav a'))
      a.classList.toggle('here', a.dataset.page === page);
    const fail = (e) => $(`page-${page}`).replaceChildren(h('p', { class: 'error' }, e.message));
    if (page === 'doctor') renderDoctor($('page-doctor'), this.api).catch(fail);
    else if (page === 'bench') renderBench($('page-bench'), this.api).catch(fail);
    else {
      this.graph.cy.resize();
      void this.reload();
    }
  }

  /** Reload the lineage; calls while one is under way coalesce into one more after it. */
  reload() {
    if (this.pending) {
      this.again = true;
      return this.pending;
    }
    this.pending = this.load()
      .catch((e) => {
        if (e instanceof ApiError && e.status === 401) {
          this.stop();
          sessionStorage.removeItem(TOKEN_KEY);
          showLogin(e.message);
        }
      })
      .finally(() => {
        this.pending = undefined;
        if (this.again) {
          this.again = false;
          void this.reload();
        }
      });
    return this.pending;
  }

  async load() {
    const [{ nodes }, { sandboxes }, { snapshots }] = await Promise.all([
      this.api.get('/v1/lineage'),
      this.api.get('/v1/sandboxes'),
      this.api.get('/v1/snapshots'),
    ]);
    const tiers = new Map(sandboxes.map((s) => [s.id, s.tier ?? 'running']));
    const sources = new Map(
      snapshots.filter((s) => s.source_sandbox).map((s) => [s.tag, s.source_sandbox]),
    );
    const shown = this.graph.update(nodes, tiers, sources);
    // Pool VMs are QEMUs but not sandboxes: counted here so they are not hidden. By the size
    // asked for: a VM becoming ready is no row change, so no event would redraw the count.
    const pools = new Map(snapshots.filter((s) => s.pool.size > 0).map((s) => [s.tag, s.pool]));
    this.renderList(shown, tiers, pools);
    void this.details.refresh();
  }

  renderList(nodes, tiers, pools) {
    const stateOf = (n) => {
      if (n.kind === 'sandbox' && tiers.get(n.id) !== 'running')
        return `${n.state} · ${tiers.get(n.id)}`;
      const pool = n.kind === 'snapshot' ? pools.get(n.id) : undefined;
      return pool ? `${n.state} · ${poolVms(pool.size)}` : n.state;
    };
    const rows = nodes.map((n) =>
      h(
        'tr',
        {
          'data-kind': n.kind,
          'data-id': n.id,
          onclick: () => this.graph.cy.getElementById(`${n.kind}:${n.id}`).emit('tap'),
        },
        h('td', {}, n.kind),
        h('td', {}, h('code', {}, n.id)),
        h('td', {}, stateOf(n)),
        h('td', {}, n.parent ? `${n.parent.kind} ${n.parent.id}` : '—'),
        h('td', {}, ago(n.created_at)),
      ),
    );
    document.querySelector('#nodes tbody').replaceChildren(...rows);
    const total = [...pools.values()].reduce((sum, p) => sum + p.size, 0);
    $('pool-summary').hidden = total === 0;
    $('pool-summary').textContent =
      `+ ${poolVms(total)} kept for forks (not sandboxes; forkd snapshot pool TAG 0 removes them)`;
  }
}

const poolVms = (n) => `${n} pool VM${n === 1 ? '' : 's'}`;

let app;

async function enter(token) {
  try {
    const api = await signIn(token);
    sessionStorage.setItem(TOKEN_KEY, token);
    app = new App(api);
    app.start();
  } catch (e) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(e instanceof ApiError && e.status === 401 ? `Wrong token: ${e.message}` : e.message);
  }
}

$('login-form').addEventListener('submit', (e) => {
  e.preventDefault();
  void enter($('token').value.trim());
});
$('logout').addEventListener('click', () => {
  app?.stop();
  app = undefined;
  sessionStorage.removeItem(TOKEN_KEY);
  location.hash = '';
  location.reload();
});

tokenFromUrl();
const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) void enter(saved);
else showLogin();
