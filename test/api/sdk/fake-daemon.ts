/**
 * A tiny daemon speaking the REST contract (node:http on a unix socket or TCP) for the SDK
 * tests. It checks every request the SDK sends against the schemas of src/contract/schemas.ts,
 * so request bodies and queries cannot drift, records them, and answers with whatever
 * handler a test set for the route.
 */
import { after, before, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Value } from 'typebox/value';
import type { TSchema } from 'typebox';
import * as schemas from '../../../src/contract/schemas.js';

export const ID = 'sbx-0123456789ab';

/** A Sandbox answer with every field. */
export function sandboxWire(over: Record<string, unknown> = {}) {
  return {
    id: ID,
    state: 'running',
    image: 'busybox',
    snapshot: null,
    parent: null,
    memory_mib: 256,
    cpus: 1,
    labels: { job: '7' },
    created_at: '2025-01-01T00:00:00.000Z',
    expires_at: null,
    pid: 4242,
    ...over,
  };
}

/** A Snapshot answer with every field, plus ones this SDK does not know. */
export function snapshotWire(over: Record<string, unknown> = {}) {
  return {
    tag: 'warm',
    state: 'ready',
    bootable: true,
    image: 'busybox',
    parent: null,
    source_sandbox: null,
    memory_mib: 256,
    cpus: 1,
    labels: { team: 'a' },
    created_at: '2025-01-01T00:00:00.000Z',
    kernel: '6.1.0',
    qemu: '8.2.2',
    files: [{ name: 'memory', size: 100, allocated: 40, sha256: 'ab', inode: 7 }],
    logical_bytes: 100,
    physical_bytes: 40,
    children_alive: 2,
    pool: { size: 2, ready: 1, warming: 1 },
    depth: 0,
    ancestors: [],
    dependents: [],
    from_the_future: true,
    ...over,
  };
}

export interface Seen {
  method: string;
  route: string;
  query: Record<string, unknown>;
  headers: IncomingMessage['headers'];
  body: Buffer;
}

export type Handler = (req: Seen, res: ServerResponse) => void | Promise<void>;

/** Query values as the daemon coerces them (query strings carry only text). */
function coerceQuery(params: URLSearchParams, schema: TSchema | undefined) {
  const props = (schema as { properties?: Record<string, { type?: string }> })?.properties ?? {};
  const out: Record<string, unknown> = {};
  for (const [k, v] of params) {
    const type = props[k]?.type;
    out[k] =
      type === 'boolean' && /^(true|false)$/.test(v)
        ? v === 'true'
        : type === 'integer' && /^\d+$/.test(v)
          ? Number(v)
          : v;
  }
  return out;
}

/** Route table: `METHOD /path` with `:id`/`:exec_id`/`:name`/`:tag` → body and query schemas. */
const ROUTES: Record<string, { body?: TSchema; query?: TSchema; raw?: boolean }> = {
  'POST /v1/sandboxes': { body: schemas.CreateSandbox },
  'GET /v1/sandboxes': { query: schemas.ListSandboxesQuery },
  'GET /v1/sandboxes/:id': {},
  'PATCH /v1/sandboxes/:id': { body: schemas.PatchSandbox },
  'DELETE /v1/sandboxes/:id': {},
  'GET /v1/sandboxes/:id/logs': {},
  'POST /v1/sandboxes/:id/exec': { body: schemas.ExecRequest },
  'POST /v1/sandboxes/:id/execs/:exec_id/stdin': { query: schemas.StdinQuery, raw: true },
  'POST /v1/sandboxes/:id/execs/:exec_id/kill': { body: schemas.KillExec },
  'GET /v1/sandboxes/:id/files': { query: schemas.PathQuery },
  'PUT /v1/sandboxes/:id/files': { query: schemas.PutFileQuery, raw: true },
  'DELETE /v1/sandboxes/:id/files': { query: schemas.RemoveQuery },
  'GET /v1/sandboxes/:id/files/stat': { query: schemas.PathQuery },
  'GET /v1/sandboxes/:id/files/list': { query: schemas.PathQuery },
  'POST /v1/sandboxes/:id/files/mkdir': { body: schemas.Mkdir },
  'GET /v1/images': {},
  'POST /v1/images': { body: schemas.CreateImage },
  'DELETE /v1/images/:name': {},
  'POST /v1/snapshots': { body: schemas.CreateSnapshot },
  'GET /v1/snapshots': {},
  'GET /v1/snapshots/:tag': {},
  'POST /v1/snapshots/:tag/verify': {},
  'PUT /v1/snapshots/:tag/pool': { body: schemas.SetPool },
  'DELETE /v1/snapshots/:tag': { query: schemas.RemoveSnapshotQuery },
  'POST /v1/snapshots/:tag/compact': { body: schemas.CompactSnapshot },
  'POST /v1/sandboxes/:id/branch': { body: schemas.BranchRequest },
  'GET /v1/lineage': { query: schemas.LineageQuery },
  'GET /healthz': {},
  'GET /version': {},
};

function routeOf(method: string, path: string): string {
  const route = path
    .replace(/^\/v1\/sandboxes\/[^/]+/, '/v1/sandboxes/:id')
    .replace(/\/execs\/[^/]+/, '/execs/:exec_id')
    .replace(/^\/v1\/images\/[^/]+$/, '/v1/images/:name')
    .replace(/^\/v1\/snapshots\/[^/]+/, '/v1/snapshots/:tag');
  return `${method} ${route}`;
}

/** The fake daemon: validates, records, and answers with the handler a test set. */
export class FakeDaemon {
  readonly seen: Seen[] = [];
  readonly violations: string[] = [];
  handlers = new Map<string, Handler>();
  private server!: Server;
  url = '';

  async start(listen: { socketPath: string } | { port: 0 }): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => {
      if ('socketPath' in listen) this.server.listen(listen.socketPath, resolve);
      else this.server.listen(0, '127.0.0.1', resolve);
    });
    this.url =
      'socketPath' in listen
        ? `unix:${listen.socketPath}`
        : `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  stop(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  on(route: string, handler: Handler): void {
    assert.ok(ROUTES[route], `no route ${route} in the contract`);
    this.handlers.set(route, handler);
  }

  last(route: string): Seen | undefined {
    return this.seen.filter((s) => s.route === route).at(-1);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    const route = routeOf(req.method ?? '', url.pathname);
    const spec = ROUTES[route];
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const seen: Seen = {
      method: req.method ?? '',
      route,
      query: coerceQuery(url.searchParams, spec?.query),
      headers: req.headers,
      body: Buffer.concat(chunks),
    };
    this.seen.push(seen);
    if (!spec) return json(res, 404, { error: { code: 'not_found', message: route } });
    this.check(route, spec, seen);
    const handler = this.handlers.get(route);
    if (!handler)
      return json(res, 500, { error: { code: 'internal', message: `no handler: ${route}` } });
    await handler(seen, res);
  }

  private check(route: string, spec: (typeof ROUTES)[string], seen: Seen): void {
    const fail = (what: string, schema: TSchema, value: unknown) => {
      if (!Value.Check(schema, value)) {
        const errs = [...Value.Errors(schema, value)].map((e) => JSON.stringify(e)).join('; ');
        this.violations.push(`${route} ${what} ${JSON.stringify(value)}: ${errs}`);
      }
    };
    if (spec.query) fail('query', spec.query, seen.query);
    else if (Object.keys(seen.query).length) this.violations.push(`${route}: unexpected query`);
    if (spec.body) {
      if (seen.headers['content-type'] !== 'application/json') {
        this.violations.push(`${route}: content-type ${seen.headers['content-type']}`);
      }
      fail('body', spec.body, JSON.parse(seen.body.toString() || 'null'));
    }
    if (spec.raw && seen.headers['content-type'] !== 'application/octet-stream') {
      this.violations.push(`${route}: content-type ${seen.headers['content-type']}`);
    }
  }
}

/**
 * A test file's fake daemon on a unix socket in its own temporary directory (`prefix`):
 * started before the file's tests, stopped and the directory removed after them. Before
 * each test the handlers are cleared and `defaults` sets the ones every test relies on;
 * after them all, every request any test sent must have matched the contract.
 */
export function fakeDaemonForFile(
  prefix: string,
  defaults: (fake: FakeDaemon) => void = () => undefined,
): { fake: FakeDaemon; dir: string; url: string } {
  const fake = new FakeDaemon();
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const socketPath = join(dir, 'forkd.sock');
  before(() => fake.start({ socketPath }));
  after(async () => {
    await fake.stop();
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    fake.handlers.clear();
    defaults(fake);
  });
  after(() => assert.deepEqual(fake.violations, []));
  return { fake, dir, url: `unix:${socketPath}` };
}

export function json(res: ServerResponse, status: number, value: unknown, headers = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(value));
}

export function noContent(res: ServerResponse): void {
  res.writeHead(204).end();
}

/** Stream NDJSON events, with an optional pause before each. */
export async function ndjson(res: ServerResponse, events: unknown[], pauseMs = 0): Promise<void> {
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  for (const ev of events) {
    if (pauseMs) await sleep(pauseMs);
    res.write(JSON.stringify(ev) + '\n');
  }
  res.end();
}
