/**
 * `forkd ui`: where to open the web UI. A daemon on TCP serves it at URL/ui (the user
 * signs in with their token). A browser cannot reach a unix socket, so for the local
 * socket this verb serves a loopback address that forwards to it, for as long as it runs,
 * guarded by a fresh random token that the printed URL carries in its fragment (never sent
 * over the wire; the page moves it into the tab's sessionStorage). Requests with another
 * Host header are refused (no DNS rebinding onto the daemon).
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Command } from 'commander';
import { resolveConfig } from '@forkd/sdk';
import { clientConfig, daemonOptions, findDaemon, type DaemonFlags } from './client.js';
import { action, printJson } from './output.js';

interface UiFlags extends DaemonFlags {
  port?: string;
  open?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(cmd)
    .option(
      '--port <port>',
      'loopback port to serve on for a unix-socket daemon (default: any free one)',
    )
    .option('--open', 'also open the URL in the default browser (xdg-open)')
    .option('--json', 'machine-readable output')
    .action(action(async (flags: UiFlags) => ui(flags)));
}

async function ui(flags: UiFlags): Promise<number | void> {
  const config = resolveConfig(clientConfig(flags));
  await findDaemon(clientConfig(flags)); // a daemon that does not answer is an error now
  const endpoint = config.endpoint;
  if (endpoint.kind !== 'unix') {
    const url = `${config.url.replace(/\/+$/, '')}/ui`;
    announce(url, flags, false);
    return;
  }
  const token = randomBytes(32).toString('base64url');
  const server = await serveProxy(
    endpoint.socketPath,
    token,
    config.token,
    Number(flags.port ?? 0),
  );
  const { port } = server.address() as { port: number };
  announce(`http://127.0.0.1:${port}/ui#token=${token}`, flags, true);
  await new Promise<void>((resolve) => {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => resolve());
  });
  server.closeAllConnections();
  server.close();
}

function announce(url: string, flags: UiFlags, proxied: boolean): void {
  if (flags.json) printJson({ url, proxied });
  else {
    process.stdout.write(`${url}\n`);
    if (proxied) process.stderr.write('forwarding to the daemon until Ctrl-C\n');
  }
  if (flags.open)
    void import('node:child_process').then((cp) =>
      cp
        .spawn('xdg-open', [url], { stdio: 'ignore', detached: true })
        .on('error', () => undefined)
        .unref(),
    );
}

/** Pages and liveness need no token (they carry no data); everything else does. */
const isOpen = (path: string) => path === '/ui' || path.startsWith('/ui/') || path === '/healthz';

function sameToken(presented: string | undefined, token: string): boolean {
  const a = Buffer.from(presented ?? '');
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** The proxy token of a request: its bearer header, or a WebSocket's subprotocol offer. */
function presented(req: IncomingMessage): string | undefined {
  const m = /^Bearer +(\S+) *$/i.exec(req.headers.authorization ?? '');
  if (m) return m[1];
  const offer = (req.headers['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim())
    .find((p) => p.startsWith('forkd.bearer.'));
  return offer && Buffer.from(offer.slice('forkd.bearer.'.length), 'base64url').toString('utf8');
}

/** Why a request may not pass, or undefined when it may. */
function refusal(req: IncomingMessage, token: string, port: number): string | undefined {
  if (req.headers.host !== `127.0.0.1:${port}` && req.headers.host !== `localhost:${port}`) {
    return `this address serves only http://127.0.0.1:${port}`;
  }
  const path = (req.url ?? '/').split('?')[0] as string;
  if (isOpen(path) || sameToken(presented(req), token)) return undefined;
  return 'wrong or missing token: open the URL `forkd ui` printed';
}

/** The headers the daemon gets: the daemon's own token (if any) in place of the proxy's. */
function forwardHeaders(req: IncomingMessage, daemonToken: string | undefined) {
  const headers = { ...req.headers };
  delete headers.authorization;
  if (daemonToken) headers.authorization = `Bearer ${daemonToken}`;
  if (headers['sec-websocket-protocol']) headers['sec-websocket-protocol'] = 'forkd';
  return headers;
}

function refuse(res: ServerResponse, status: number, message: string): void {
  const code = status === 401 ? 'unauthorized' : 'forbidden';
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { code, message, details: {} } }));
}

async function serveProxy(
  socketPath: string,
  token: string,
  daemonToken: string | undefined,
  wantPort: number,
) {
  let port = 0;
  const server = createServer((req, res) => {
    const why = refusal(req, token, port);
    if (why) return refuse(res, why.startsWith('wrong') ? 401 : 403, why);
    const upstream = httpRequest(
      { socketPath, method: req.method, path: req.url, headers: forwardHeaders(req, daemonToken) },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () =>
      res.headersSent ? res.destroy() : refuse(res, 502, 'the daemon went away'),
    );
    res.on('close', () => upstream.destroy());
    req.pipe(upstream);
  });
  server.on('upgrade', (req: IncomingMessage, client: Duplex, head: Buffer) => {
    const why = refusal(req, token, port);
    if (why) return client.end(`HTTP/1.1 ${why.startsWith('wrong') ? 401 : 403} Refused\r\n\r\n`);
    const daemon = connect(socketPath, () => {
      const headers = forwardHeaders(req, daemonToken);
      const lines = Object.entries(headers).flatMap(([k, v]) =>
        [v ?? []].flat().map((x) => `${k}: ${x}`),
      );
      daemon.write(`${req.method} ${req.url} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`);
      if (head.length) daemon.write(head);
      daemon.pipe(client).pipe(daemon);
    });
    const end = () => {
      daemon.destroy();
      client.destroy();
    };
    daemon.on('error', end);
    client.on('error', end);
    client.on('close', end);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(wantPort, '127.0.0.1', () => resolve());
  });
  port = (server.address() as { port: number }).port;
  return server;
}
