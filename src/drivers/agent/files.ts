/**
 * Guest file operations. Transfers stream base64 chunks in both directions; uploads wait
 * for the socket to drain so a large file never sits whole in the socket's buffer.
 */
import { ForkdError } from '../../errors.js';
import type { AgentConnection, CallOptions } from './connection.js';
import { decodeData, rechunk, type AgentMessage } from './wire.js';

export interface FileStat {
  name: string;
  kind: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: number;
  mtimeMs: number;
  /** A symlink's target, as written (agents before xattr_set leave it out). */
  target?: string;
  /** A file's or directory's `user.*` extended attributes, when it has any. */
  xattrs?: Record<string, string>;
}

const KINDS: readonly FileStat['kind'][] = ['file', 'dir', 'symlink', 'other'];

/** Guest paths must be absolute: relative to PID 1's cwd they would mean nothing useful. */
export function checkPath(path: string): void {
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0')) {
    throw new ForkdError('bad_request', `guest paths must be absolute: ${JSON.stringify(path)}`, {
      path,
    });
  }
}

export function toFileStat(msg: Record<string, unknown>): FileStat {
  const kind = KINDS.find((k) => k === msg.kind) ?? 'other';
  const num = (v: unknown) => (typeof v === 'number' ? v : 0);
  return {
    name: typeof msg.name === 'string' ? msg.name : '',
    kind,
    size: num(msg.size),
    mode: num(msg.mode),
    mtimeMs: num(msg.mtime_ms),
    ...(typeof msg.target === 'string' ? { target: msg.target } : {}),
    ...(isStringMap(msg.xattrs) ? { xattrs: msg.xattrs } : {}),
  };
}

function isStringMap(v: unknown): v is Record<string, string> {
  return (
    typeof v === 'object' &&
    v !== null &&
    !Array.isArray(v) &&
    Object.values(v).every((x) => typeof x === 'string')
  );
}

/** A file op with a single `result`: stat, list, mkdir, remove. */
export function fileCall(
  conn: AgentConnection,
  type: string,
  path: string,
  fields: Record<string, unknown>,
  opts: CallOptions = {},
): Promise<AgentMessage> {
  checkPath(path);
  return conn.call({ type, path, ...fields }, { ...opts, kind: 'file', subject: path }).done;
}

/**
 * Uploads `data` to `path` (atomically: the agent renames a temp file at eof); returns the
 * size the agent wrote. An abandoned upload leaves the agent's temp file until the next resync.
 */
export async function writeFile(
  conn: AgentConnection,
  path: string,
  data: Buffer | AsyncIterable<Buffer>,
  opts: { mode?: number; parents?: boolean } & CallOptions = {},
): Promise<number> {
  checkPath(path);
  const { mode, parents, ...callOpts } = opts;
  const call = conn.call(
    { type: 'file_write', path, mode, parents },
    { ...callOpts, kind: 'file', subject: path },
  );
  let over = false;
  call.done.then(
    () => (over = true),
    () => (over = true),
  );
  const pump = async () => {
    try {
      for await (const piece of rechunk(Buffer.isBuffer(data) ? [data] : data)) {
        if (over) return; // the agent already answered (an error): later chunks are moot
        await conn.sendFlow({ type: 'data', id: call.id, data: piece.toString('base64') });
      }
      if (!over) conn.send({ type: 'eof', id: call.id });
    } catch (e) {
      call.cancel(e as Error);
      throw e;
    }
  };
  const [, reply] = await Promise.all([pump(), call.done]);
  return typeof reply.size === 'number' ? reply.size : 0;
}

/** Downloads `path` into memory. */
export async function readFile(
  conn: AgentConnection,
  path: string,
  opts: CallOptions = {},
): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of readFileStream(conn, path, opts)) parts.push(part);
  return Buffer.concat(parts);
}

/**
 * Downloads `path` chunk by chunk. The agent cannot be slowed down per request, so chunks
 * that arrive faster than they are consumed queue up in memory.
 */
export async function* readFileStream(
  conn: AgentConnection,
  path: string,
  opts: CallOptions = {},
): AsyncGenerator<Buffer> {
  checkPath(path);
  const queue: Buffer[] = [];
  let wake: (() => void) | undefined;
  const call = conn.call(
    { type: 'file_read', path },
    {
      ...opts,
      kind: 'file',
      subject: path,
      onReply: (msg) => {
        if (msg.type !== 'data') return;
        queue.push(decodeData(msg));
        wake?.();
      },
    },
  );
  let end: { reply?: AgentMessage; err?: unknown } | undefined;
  call.done.then(
    (reply) => ((end = { reply }), wake?.()),
    (err: unknown) => ((end = { err }), wake?.()),
  );
  let received = 0;
  try {
    for (;;) {
      const part = queue.shift();
      if (part) {
        received += part.length;
        yield part;
      } else if (end) {
        if ('err' in end) throw end.err;
        checkSize(path, end.reply, received);
        return;
      } else {
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
    }
  } finally {
    if (!end) call.cancel(new ForkdError('bad_request', 'read abandoned by the caller'));
  }
}

/** The agent states the size it sent; a mismatch means lost chunks, never silent truncation. */
function checkSize(path: string, reply: AgentMessage | undefined, received: number): void {
  const size = reply?.size;
  if (typeof size === 'number' && size !== received) {
    throw new ForkdError(
      'guest_error',
      `${path}: the guest agent announced ${size} bytes but sent ${received}`,
      { size, received },
    );
  }
}
