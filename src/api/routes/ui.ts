/**
 * The web UI at /ui: static pages and the libraries they import, served by the daemon
 * itself so that a browser never fetches anything from the network. The pages hold no data
 * and need no token; everything they show comes from the REST API with the token the user
 * typed in (docs/ui.md). These routes are outside the REST contract (hidden from the
 * OpenAPI document). Only the files listed at start are served: no path from the URL ever
 * reaches the file system.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyReply } from 'fastify';
import { ForkdError } from '../../errors.js';
import type { Api } from '../types.js';

/** The UI's own files: `ui/` at the package root (dist/src/api/routes → ../../../../ui). */
export const UI_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..', 'ui');

/** Libraries the pages import, as /ui/vendor/NAME: npm package and file in it. */
const VENDOR: Record<string, [pkg: string, entryRelative: string]> = {
  'cytoscape.mjs': ['cytoscape', 'cytoscape.esm.min.mjs'],
  'xterm.mjs': ['@xterm/xterm', 'xterm.mjs'],
  'xterm.css': ['@xterm/xterm', '../css/xterm.css'],
  'addon-fit.mjs': ['@xterm/addon-fit', 'addon-fit.mjs'],
};

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

/**
 * Scripts only from the daemon; fetches and WebSockets only back to it; inline styles
 * allowed because the terminal and graph libraries set them. No framing (clickjacking).
 */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'",
].join('; ');

/** URL path under /ui → file on disk, for every file that may be served. */
export function uiFiles(dir = UI_DIR): Map<string, string> {
  const files = new Map<string, string>();
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return files; // no UI shipped: /ui answers not found
  }
  for (const name of names) if (TYPES[extname(name)]) files.set(name, join(dir, name));
  const require = createRequire(import.meta.url);
  for (const [name, [pkg, rel]] of Object.entries(VENDOR)) {
    try {
      files.set(`vendor/${name}`, join(dirname(require.resolve(pkg)), rel));
    } catch {
      // The library is not installed: its page part fails visibly in the browser.
    }
  }
  return files;
}

function notFound(path: string): ForkdError {
  return new ForkdError('not_found', `no such page: /ui/${path}; open /ui`, {
    path: `/ui/${path}`,
  });
}

function serve(reply: FastifyReply, file: string, path: string) {
  let body: Buffer;
  try {
    body = readFileSync(file);
  } catch {
    throw notFound(path);
  }
  return reply
    .type(TYPES[extname(file)] ?? 'application/octet-stream')
    .header('content-security-policy', CSP)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .header('cache-control', 'no-cache')
    .send(body);
}

export async function uiRoutes(app: Api) {
  const files = uiFiles();
  const opts = { config: { public: true }, schema: { hide: true } } as const;
  app.get('/ui', opts, async (_request, reply) => {
    const index = files.get('index.html');
    if (!index) throw notFound('');
    return serve(reply, index, '');
  });
  app.get<{ Params: { '*': string } }>('/ui/*', opts, async (request, reply) => {
    const path = request.params['*'] || 'index.html';
    const file = files.get(path);
    if (!file) throw notFound(path);
    return serve(reply, file, path);
  });
}
