/**
 * envd's file surface over forkd's file service: filesystem.Filesystem (Stat, ListDir,
 * MakeDir, Remove, Move; WatchDir by polling, watch.ts) as Connect-RPC, `GET /files`
 * (download; gzip when Accept-Encoding asks) and `POST /files` (multipart or raw,
 * optionally gzip), and `GET /health` (204 while the sandbox runs, 502 once it is gone:
 * the SDK's isRunning()). A call acts as the user it names, else the
 * sandbox's default user (E2B's template user): relative paths are taken from where that
 * user's commands start (the snapshot's working directory, else the user's home), so files
 * and commands agree on what `a.txt` is, and what a call creates belongs to that user.
 */
import { posix } from 'node:path';
import { pipeline, Readable } from 'node:stream';
import { createGunzip, createGzip } from 'node:zlib';
import type { FastifyRequest } from 'fastify';
import { ForkdError, isForkdError } from '../../errors.js';
import type { FileStatT } from '../../contract/schemas.js';
import { limitedBody } from '../raw-body.js';
import { MAX_UPLOAD_BYTES } from '../routes/files.js';
import type { Api } from '../types.js';
import type { E2bContext } from './app.js';
import { parseMultipart } from './multipart.js';
import { serverStream, unary } from './rpc.js';
import { watchDir } from './watch.js';
import { ConnectFailure, requiredString, uintField } from './wire.js';

const SERVICE = '/filesystem.Filesystem';
const KEEPALIVE = { keepalive: {} };
/** ListDir with depth > 1 walks the tree: bound what one answer may hold. */
const MAX_LIST_ENTRIES = 10_000;

const FILE_TYPE: Record<FileStatT['kind'], string> = {
  file: 'FILE_TYPE_FILE',
  dir: 'FILE_TYPE_DIRECTORY',
  symlink: 'FILE_TYPE_SYMLINK',
  other: 'FILE_TYPE_UNSPECIFIED',
};
const TYPE_LETTER: Record<FileStatT['kind'], string> = {
  file: '-',
  dir: 'd',
  symlink: 'l',
  other: '?',
};

/** A guest path from an E2B client: relative ones are taken from `cwd`. */
export function guestPath(path: string, cwd = '/'): string {
  return posix.resolve(cwd, path);
}

/** `drwxr-xr-x` from a kind and mode bits. */
export function permissions(kind: FileStatT['kind'], mode: number): string {
  const bits = 'rwxrwxrwx';
  let s = TYPE_LETTER[kind];
  for (let i = 0; i < 9; i++) s += mode & (1 << (8 - i)) ? bits[i] : '-';
  return s;
}

/** forkd's FileStat of `path` → envd's EntryInfo (proto3 JSON: int64 size as a string). */
export function entryInfo(stat: FileStatT, path: string) {
  return {
    name: stat.name || posix.basename(path),
    type: FILE_TYPE[stat.kind],
    path,
    size: String(stat.size),
    mode: stat.mode & 0o7777,
    permissions: permissions(stat.kind, stat.mode),
    owner: stat.owner ?? '',
    group: stat.group ?? '',
    modifiedTime: new Date(stat.mtime_ms).toISOString(),
    // envd reports where a symlink points as an absolute path.
    ...(stat.target === undefined
      ? {}
      : { symlinkTarget: posix.resolve(posix.dirname(path), stat.target) }),
    ...(metadataOf(stat.xattrs) ? { metadata: metadataOf(stat.xattrs) } : {}),
  };
}

type Entry = ReturnType<typeof entryInfo>;

const missing = (e: unknown) => isForkdError(e) && e.code === 'guest_file_not_found';

/** envd 0.6.2's file metadata: `X-Metadata-<key>` upload headers, kept as `user.e2b.<key>`. */
const METADATA_HEADER = 'x-metadata-';
const METADATA_XATTR = 'user.e2b.';
/** What the SDK allows (HTTP token keys, printable US-ASCII values), checked again here. */
const METADATA_KEY = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const METADATA_VALUE = /^[\x20-\x7e]*$/;

/** The upload's metadata as xattrs (undefined when it carries none). */
export function metadataXattrs(
  headers: Record<string, string | string[] | undefined>,
): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  for (const [name, raw] of Object.entries(headers)) {
    if (!name.startsWith(METADATA_HEADER)) continue;
    const key = name.slice(METADATA_HEADER.length);
    const value = Array.isArray(raw) ? raw.join(', ') : (raw ?? '');
    if (!METADATA_KEY.test(key) || !METADATA_VALUE.test(value)) {
      throw new ForkdError(
        'bad_request',
        `${name}: metadata keys are HTTP tokens and values printable US-ASCII`,
        { field: name },
      );
    }
    out[METADATA_XATTR + key] = value;
  }
  return Object.keys(out).length ? out : undefined;
}

/** A file's `user.e2b.*` xattrs as E2B's metadata (undefined when it has none). */
export function metadataOf(xattrs: Record<string, string> | undefined) {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(xattrs ?? {})) {
    if (name.startsWith(METADATA_XATTR)) out[name.slice(METADATA_XATTR.length)] = value;
  }
  return Object.keys(out).length ? out : undefined;
}

export async function filesystemRoutes(app: Api, { ctx }: { ctx: E2bContext }) {
  const sandboxes = ctx.services.sandboxes;
  const pathOf = async (request: FastifyRequest, msg: Record<string, unknown>, field = 'path') =>
    guestPath(requiredString(msg, field), (await ctx.who(request)).cwd);

  async function stat(sandbox: string, path: string): Promise<Entry> {
    return entryInfo(await sandboxes.statFile(sandbox, path, { owners: true }), path);
  }

  /** Entries under `dir` down to `depth` levels (1: the directory itself). */
  async function walk(sandbox: string, dir: string, depth: number, out: Entry[]): Promise<void> {
    for (const s of await sandboxes.listFiles(sandbox, dir, { owners: true })) {
      if (out.length >= MAX_LIST_ENTRIES) {
        throw new ForkdError(
          'bad_request',
          `more than ${MAX_LIST_ENTRIES} entries: list less deep`,
        );
      }
      const path = posix.join(dir, s.name);
      out.push(entryInfo(s, path));
      if (s.kind === 'dir' && depth > 1) await walk(sandbox, path, depth - 1, out);
    }
  }

  unary(app, `${SERVICE}/Stat`, async (msg, request) => ({
    entry: await stat(ctx.sandboxOf(request), await pathOf(request, msg)),
  }));

  unary(app, `${SERVICE}/ListDir`, async (msg, request) => {
    const sandbox = ctx.sandboxOf(request);
    const entries: Entry[] = [];
    await walk(
      sandbox,
      await pathOf(request, msg),
      Math.max(1, uintField(msg, 'depth') ?? 1),
      entries,
    );
    return { entries };
  });

  unary(app, `${SERVICE}/MakeDir`, async (msg, request) => {
    const sandbox = ctx.sandboxOf(request);
    const path = await pathOf(request, msg);
    const existing = await stat(sandbox, path).catch((e: unknown) => {
      if (missing(e)) return undefined;
      throw e;
    });
    if (existing) throw new ConnectFailure('already_exists', `${path} already exists`);
    const user = (await ctx.who(request)).name;
    await sandboxes.makeDir(sandbox, path, { parents: true, user });
    return { entry: await stat(sandbox, path) };
  });

  unary(app, `${SERVICE}/Remove`, async (msg, request) => {
    const path = await pathOf(request, msg);
    // envd: removing what is not there is done, not an error.
    await sandboxes.removeFile(ctx.sandboxOf(request), path, { recursive: true }).catch((e) => {
      if (!missing(e)) throw e;
    });
    return {};
  });

  unary(app, `${SERVICE}/Move`, async (msg, request) => {
    const sandbox = ctx.sandboxOf(request);
    const [from, to] = [
      await pathOf(request, msg, 'source'),
      await pathOf(request, msg, 'destination'),
    ];
    await stat(sandbox, from);
    // forkd's file service has no rename: the guest's own mv does it, in one step, as the
    // call's user (whose permissions apply, as with E2B's envd).
    const argv = ['mv', '-f', '--', from, to];
    const r = await sandboxes.exec(sandbox, { argv, user: (await ctx.who(request)).name });
    if (r.exit_code !== 0) {
      const why = Buffer.from(r.stderr, 'base64').toString('utf8').trim().slice(0, 300);
      throw new ForkdError('guest_error', `mv ${from} ${to} failed: ${why}`);
    }
    return { entry: await stat(sandbox, to) };
  });

  serverStream(app, `${SERVICE}/WatchDir`, KEEPALIVE, async (msg, out, request) => {
    const spec = {
      dir: await pathOf(request, msg),
      recursive: msg.recursive === true,
      includeEntry: msg.includeEntry === true,
    };
    await watchDir(ctx.services, ctx.sandboxOf(request), spec, out);
  });

  for (const method of ['CreateWatcher', 'GetWatcherEvents', 'RemoveWatcher']) {
    app.post(`${SERVICE}/${method}`, { config: { plane: 'rpc' } }, async () => {
      throw new ConnectFailure(
        'unimplemented',
        `filesystem.Filesystem/${method} is not served by forkd: use watchDir's stream`,
      );
    });
  }

  const queryPath = (request: FastifyRequest): string | undefined => {
    const p = (request.query as Record<string, unknown>).path;
    return typeof p === 'string' && p ? p : undefined;
  };

  app.get('/files', { config: { plane: 'envd' } }, async (request, reply) => {
    const path = queryPath(request);
    if (!path) throw new ForkdError('bad_request', 'query.path: required');
    const cwd = (await ctx.who(request)).cwd;
    const stream = await sandboxes.readFile(ctx.sandboxOf(request), guestPath(path, cwd));
    reply.type('application/octet-stream');
    // `files.read(p, {gzip: true})` asks with Accept-Encoding: the bytes travel compressed.
    if (!/\bgzip\b/i.test(String(request.headers['accept-encoding'] ?? '')))
      return reply.send(stream);
    return reply
      .header('content-encoding', 'gzip')
      .send(pipeline(stream, createGzip(), () => undefined));
  });

  /** The files of one upload: each target path with its bytes. */
  function uploads(request: FastifyRequest): { path: string; body: Readable }[] {
    const path = queryPath(request);
    const type = request.headers['content-type'] ?? '';
    if (/^multipart\/form-data/i.test(type)) {
      const parts = parseMultipart(request.body as Buffer, type).filter((p) => p.name === 'file');
      if (!parts.length) throw new ForkdError('bad_request', 'multipart body: no `file` part');
      return parts.map((p) => {
        const target = parts.length === 1 && path ? path : p.filename;
        if (!target) throw new ForkdError('bad_request', 'a file part has no filename (its path)');
        return { path: target, body: Readable.from([p.data]) };
      });
    }
    if (!path) throw new ForkdError('bad_request', 'query.path: required for a raw upload');
    let body = limitedBody(request.body, request.headers['content-length'], MAX_UPLOAD_BYTES);
    if (/gzip/i.test(String(request.headers['content-encoding'] ?? ''))) {
      body = pipeline(body, createGunzip(), () => undefined);
    }
    return [{ path, body }];
  }

  app.post('/files', { config: { plane: 'envd' } }, async (request) => {
    const xattrs = metadataXattrs(request.headers);
    const metadata = metadataOf(xattrs);
    const sandbox = ctx.sandboxOf(request);
    const who = await ctx.who(request);
    const written = [];
    for (const file of uploads(request)) {
      const path = guestPath(file.path, who.cwd);
      // A write replaces the file (the agent renames a new one over it): metadata it had
      // before is gone unless this upload brings it again, as with envd.
      const opts = { parents: true, user: who.name, ...(xattrs ? { xattrs } : {}) };
      await sandboxes.writeFile(sandbox, path, file.body, opts);
      written.push({
        name: posix.basename(path),
        type: 'file',
        path,
        ...(metadata ? { metadata } : {}),
      });
    }
    return written;
  });

  app.get('/health', { config: { plane: 'public' } }, async (request, reply) => {
    const s = await ctx.services.sandboxes.get(ctx.sandboxOf(request)).catch(() => undefined);
    // Past its deadline it is being ended (stopping QEMU takes a moment): no longer running.
    const expired = s?.expires_at != null && Date.parse(s.expires_at) <= Date.now();
    const up = s?.state === 'running' && !expired;
    if (!up) return reply.code(502).send({ code: 502, message: 'the sandbox is not running' });
    return reply.code(204).send();
  });
}
