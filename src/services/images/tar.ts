/**
 * A streaming tar reader (ustar, GNU long names, pax). Written here rather than taken from
 * npm because the libraries at hand decode pax records as UTF-8 text, and an xattr value
 * (a file capability) is binary: it must reach the image byte for byte.
 */
import { ForkdError } from '../../errors.js';

export type EntryType = 'file' | 'link' | 'symlink' | 'char' | 'block' | 'dir' | 'fifo' | 'other';

/** One entry's header, with pax overrides applied. */
export interface TarHeader {
  path: string;
  type: EntryType;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  linkpath: string;
  devmajor: number;
  devminor: number;
  /** `SCHILY.xattr.*` records, raw bytes. */
  xattrs: Map<string, Buffer>;
}

const BLOCK = 512;
const TYPES: Record<string, EntryType> = {
  '0': 'file',
  '\0': 'file',
  '7': 'file',
  '1': 'link',
  '2': 'symlink',
  '3': 'char',
  '4': 'block',
  '5': 'dir',
  '6': 'fifo',
};

/** Reads exact byte counts from an async stream of chunks. */
class Bytes {
  private buf = Buffer.alloc(0);
  private done = false;
  constructor(private readonly it: AsyncIterator<Buffer>) {}

  private async fill(n: number): Promise<void> {
    while (this.buf.length < n && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else this.buf = this.buf.length ? Buffer.concat([this.buf, r.value]) : Buffer.from(r.value);
    }
  }

  /** Exactly n bytes, or fewer at the end of the stream. */
  async read(n: number): Promise<Buffer> {
    await this.fill(n);
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(out.length);
    return out;
  }

  /** n bytes in chunks as they come. */
  async *chunks(n: number): AsyncGenerator<Buffer> {
    while (n > 0) {
      if (this.buf.length === 0) await this.fill(1);
      if (this.buf.length === 0) throw truncated();
      const out = this.buf.subarray(0, Math.min(n, this.buf.length));
      this.buf = this.buf.subarray(out.length);
      n -= out.length;
      yield out;
    }
  }
}

/**
 * Calls `onEntry` for each entry in order, with its body as chunks (entries that are not
 * regular files have none). A body the callback leaves unread is skipped.
 */
export async function readTar(
  stream: AsyncIterable<Buffer>,
  onEntry: (h: TarHeader, body: AsyncIterable<Buffer>) => Promise<void>,
): Promise<void> {
  const bytes = new Bytes(stream[Symbol.asyncIterator]());
  let pax: Map<string, Buffer> = new Map();
  let longName: string | undefined;
  let longLink: string | undefined;
  for (;;) {
    const block = await bytes.read(BLOCK);
    if (block.length === 0) return; // some writers omit the end blocks
    if (block.length < BLOCK) throw truncated();
    if (block.every((b) => b === 0)) return;
    checkSum(block);
    const flag = String.fromCharCode(block[156]!);
    const size = num(block, 124, 12);
    const padded = Math.ceil(size / BLOCK) * BLOCK;
    if (flag === 'x' || flag === 'g' || flag === 'L' || flag === 'K') {
      const data = (await bytes.read(padded)).subarray(0, size);
      if (data.length < size) throw truncated();
      if (flag === 'x') pax = parsePax(data);
      if (flag === 'L') longName = cstr(data, 0, data.length);
      if (flag === 'K') longLink = cstr(data, 0, data.length);
      continue;
    }
    const h = header(block, flag, pax, longName, longLink);
    pax = new Map();
    longName = longLink = undefined;
    const bodySize = h.type === 'file' ? h.size : 0;
    const body = bytes.chunks(bodySize);
    await onEntry(h, body);
    for await (const _ of body) void _; // drain what the callback left
    await bytes.read(Math.ceil(bodySize / BLOCK) * BLOCK - bodySize);
    // Some entries (hard links with size) carry data that is not theirs: skip it.
    if (h.type !== 'file' && h.size > 0 && flag !== '1' && flag !== '5') {
      for await (const _ of bytes.chunks(Math.ceil(h.size / BLOCK) * BLOCK)) void _;
    }
  }
}

function header(
  b: Buffer,
  flag: string,
  pax: Map<string, Buffer>,
  longName?: string,
  longLink?: string,
): TarHeader {
  const prefix = b.subarray(257, 263).toString('latin1').startsWith('ustar')
    ? cstr(b, 345, 155)
    : '';
  let path = longName ?? (prefix ? `${prefix}/${cstr(b, 0, 100)}` : cstr(b, 0, 100));
  let linkpath = longLink ?? cstr(b, 157, 100);
  const text = (k: string) => pax.get(k)?.toString('utf8');
  path = text('path') ?? path;
  linkpath = text('linkpath') ?? linkpath;
  const xattrs = new Map<string, Buffer>();
  for (const [k, v] of pax) if (k.startsWith('SCHILY.xattr.')) xattrs.set(k.slice(13), v);
  const type = TYPES[flag] ?? 'other';
  return {
    path,
    type: type === 'file' && path.endsWith('/') ? 'dir' : type,
    mode: num(b, 100, 8) & 0o7777,
    uid: Number(text('uid') ?? num(b, 108, 8)),
    gid: Number(text('gid') ?? num(b, 116, 8)),
    size: Number(text('size') ?? num(b, 124, 12)),
    mtime: Number(text('mtime') ?? num(b, 136, 12)),
    linkpath,
    devmajor: num(b, 329, 8),
    devminor: num(b, 337, 8),
    xattrs,
  };
}

/** pax records: `LEN KEY=VALUE\n`, values kept as bytes. */
function parsePax(data: Buffer): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  let at = 0;
  while (at < data.length) {
    const sp = data.indexOf(0x20, at);
    if (sp < 0) break;
    const len = Number(data.subarray(at, sp).toString('latin1'));
    if (!Number.isInteger(len) || len <= 0 || at + len > data.length) break;
    const rec = data.subarray(sp + 1, at + len - 1);
    const eq = rec.indexOf(0x3d);
    if (eq > 0) out.set(rec.subarray(0, eq).toString('utf8'), Buffer.from(rec.subarray(eq + 1)));
    at += len;
  }
  return out;
}

/** Octal, or GNU base-256 when the top bit of the first byte is set. */
function num(b: Buffer, off: number, len: number): number {
  if (b[off]! & 0x80) {
    let v = b[off]! & 0x7f;
    for (let i = 1; i < len; i++) v = v * 256 + b[off + i]!;
    return v;
  }
  const s = b
    .subarray(off, off + len)
    .toString('latin1')
    .replace(/\0.*$/s, '')
    .trim();
  return s ? parseInt(s, 8) : 0;
}

function cstr(b: Buffer, off: number, len: number): string {
  const s = b.subarray(off, off + len);
  const nul = s.indexOf(0);
  return s.subarray(0, nul < 0 ? s.length : nul).toString('utf8');
}

function checkSum(b: Buffer): void {
  let sum = 8 * 0x20;
  for (let i = 0; i < BLOCK; i++) if (i < 148 || i >= 156) sum += b[i]!;
  if (sum === num(b, 148, 8)) return;
  throw new ForkdError(
    'image_format_unsupported',
    'a layer is not a tar archive (bad header checksum)',
  );
}

function truncated(): ForkdError {
  return new ForkdError('blob_invalid', 'a layer tar ends in the middle of an entry (truncated)');
}
