// A terminal into a sandbox: @xterm/xterm over the daemon's PTY WebSocket
// (GET /v1/sandboxes/:id/pty, frames as in docs/api.md). A browser cannot put a token in a
// WebSocket's headers, so it goes as the subprotocol `forkd.bearer.<base64url>`.
// Closing the panel detaches; the session keeps running in the guest.
import { Terminal } from '/ui/vendor/xterm.mjs';
import { FitAddon } from '/ui/vendor/addon-fit.mjs';

const base64url = (text) =>
  btoa(String.fromCharCode(...new TextEncoder().encode(text)))
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '');

export class TerminalPanel {
  constructor({ panel, mount, title, status, close }) {
    this.els = { panel, mount, title, status };
    close.addEventListener('click', () => this.close());
    window.addEventListener('resize', () => this.fit?.fit());
  }

  /** Opens a login shell in sandbox `id`, replacing any terminal already open. */
  open(id, token) {
    this.close();
    const { panel, mount, title } = this.els;
    panel.hidden = false;
    title.textContent = `terminal · ${id}`;
    this.setStatus('connecting…');
    const term = new Terminal({ cursorBlink: true, fontSize: 13, convertEol: false });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(mount);
    fit.fit();
    const proto = location.protocol === 'https:' ? 'wss' : 'ws';
    const url = `${proto}://${location.host}/v1/sandboxes/${encodeURIComponent(id)}/pty?cols=${term.cols}&rows=${term.rows}`;
    const ws = new WebSocket(url, ['forkd', `forkd.bearer.${base64url(token)}`]);
    ws.binaryType = 'arraybuffer';
    const encoder = new TextEncoder();
    ws.onmessage = (e) => {
      if (typeof e.data !== 'string') return term.write(new Uint8Array(e.data));
      this.control(JSON.parse(e.data));
    };
    ws.onclose = (e) => this.setStatus(e.code === 1000 ? 'ended' : `disconnected (${e.code})`);
    term.onData((d) => ws.readyState === WebSocket.OPEN && ws.send(encoder.encode(d)));
    term.onResize(({ cols, rows }) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
    });
    term.focus();
    Object.assign(this, { term, fit, ws });
    window.forkd.term = term;
  }

  /** A text frame from the daemon: ready, exit, detached or error. */
  control(msg) {
    if (msg.type === 'ready') this.setStatus(`connected · ${msg.session}`);
    else if (msg.type === 'exit') this.setStatus(`exited (${msg.exit_code ?? msg.signal})`);
    else if (msg.type === 'error') this.setStatus(`error: ${msg.error?.message ?? 'unknown'}`);
    else if (msg.type === 'detached') this.setStatus('taken over by another client');
  }

  setStatus(text) {
    this.els.status.textContent = text;
  }

  close() {
    this.ws?.close(1000);
    this.term?.dispose();
    this.ws = this.term = this.fit = undefined;
    this.els.panel.hidden = true;
  }
}
