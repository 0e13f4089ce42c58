// Small DOM helpers: elements are built with textContent, never innerHTML, so names and
// labels from the daemon cannot inject markup.

/** `h('td', { class: 'x' }, 'text', child)` → an element. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c !== undefined && c !== null) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** Human size: 1536 → "1.5 KiB". */
export function bytes(n) {
  if (typeof n !== 'number') return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
}

/** "3 s ago", "5 min ago" for an ISO time. */
export function ago(iso) {
  if (!iso) return '—';
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

/** A definition list of [term, value] pairs (values may be elements). */
export function facts(pairs) {
  return h(
    'dl',
    { class: 'facts' },
    ...pairs
      .filter(([, v]) => v !== undefined)
      .flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]),
  );
}

let toastTimer;
/** A short message at the bottom of the page (errors stay longer). */
export function toast(text, isError = false) {
  const el = document.getElementById('toast');
  el.textContent = text;
  el.className = isError ? 'toast error' : 'toast';
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (el.hidden = true), isError ? 8000 : 3000);
}

/**
 * Asks before an action: `text`, optional input fields ({name, label, value, type}).
 * Resolves the fields' values, or null when cancelled.
 */
export function confirmAction(text, fields = [], okLabel = 'Confirm') {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = okLabel;
  const box = document.getElementById('confirm-fields');
  const inputs = fields.map((f) =>
    h('input', {
      name: f.name,
      type: f.type ?? 'text',
      value: f.value ?? '',
      placeholder: f.placeholder,
      min: f.min,
      max: f.max,
    }),
  );
  box.replaceChildren(...fields.map((f, i) => h('label', {}, f.label, inputs[i])));
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener(
      'close',
      () => {
        if (dialog.returnValue !== 'ok') return resolve(null);
        resolve(Object.fromEntries(inputs.map((i) => [i.name, i.value])));
      },
      { once: true },
    );
  });
}
