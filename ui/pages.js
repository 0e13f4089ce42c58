// The host pages: the doctor's checks (GET /v1/doctor, as `forkd doctor`) and the saved
// benchmark outputs (GET /v1/bench).
import { ago, h } from './dom.js';

export async function renderDoctor(el, api) {
  el.replaceChildren(h('p', { class: 'muted' }, 'running the checks…'));
  const report = await api.get('/v1/doctor');
  const count = (s) => report.checks.filter((c) => c.status === s).length;
  el.replaceChildren(
    h('h1', {}, 'Doctor'),
    h(
      'p',
      {},
      report.ok ? 'This host can run sandboxes. ' : 'This host cannot boot a sandbox yet. ',
      `${count('pass')} pass, ${count('warn')} warn, ${count('fail')} fail.`,
    ),
    h(
      'table',
      { class: 'doctor' },
      h(
        'thead',
        {},
        h('tr', {}, h('th', {}, 'status'), h('th', {}, 'check'), h('th', {}, 'summary')),
      ),
      h(
        'tbody',
        {},
        report.checks.map((c) =>
          h(
            'tr',
            { 'data-check': c.id },
            h('td', {}, h('span', { class: `badge ${c.status}` }, c.status.toUpperCase())),
            h('td', {}, h('code', {}, c.id)),
            h('td', {}, c.summary, c.fix ? h('div', { class: 'fix' }, 'fix: ', c.fix) : null),
          ),
        ),
      ),
    ),
  );
}

export async function renderBench(el, api) {
  const { results } = await api.get('/v1/bench');
  el.replaceChildren(
    h('h1', {}, 'Benchmarks'),
    results.length
      ? h('p', { class: 'muted' }, `${results.length} saved outputs of bench/, newest first.`)
      : h('p', {}, 'No saved benchmark outputs beside this daemon (bench/results).'),
    ...results.map((r, i) =>
      h(
        'details',
        { class: 'bench', open: i < 3 },
        h(
          'summary',
          {},
          h('code', {}, r.name),
          ' ',
          h('span', { class: 'muted' }, ago(r.modified_at)),
        ),
        h('pre', {}, r.text),
      ),
    ),
  );
}
