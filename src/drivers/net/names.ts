/**
 * The name proxy's mechanics: web connections a sandbox's namespace steers to the host end
 * of its veth (those no address rule decided, when the policy names hostnames). It peeks
 * the name the client sends first (the TLS ClientHello's SNI, or the HTTP request's
 * `Host`, reassembling a ClientHello sent in many records), asks the caller whether that
 * name may pass and where to (the caller checks the name against the destination), and
 * then either splices the connection there or resets it. What it cannot read (ECH, h2c, a
 * ClientHello past its bounds) it reports as such, for the caller to refuse. Where it was going comes from the
 * namespace's connection tracking (`/proc/PID/net/nf_conntrack` of a process in it): the
 * redirect rewrote the destination, and Node has no SO_ORIGINAL_DST.
 *
 * The steered connections arrive on the DNS proxy's TCP port, which hands over those
 * conntrack places elsewhere than port 53: the host table every forkd version installs
 * lets that port in from a veth, so a daemon of another version sharing the table (it is
 * one per host) cannot shut the proxy out.
 */
import { readFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';

export interface Endpoint {
  host: string;
  port: number;
}

/**
 * What the client sent first: the protocol it spoke and the name in it (if any), or why
 * the proxy cannot read the name it would go by (the connection is then refused).
 */
export interface Peeked {
  proto: 'tls' | 'http' | 'other';
  name?: string;
  unreadable?: Unreadable;
}

/**
 * Forms the proxy cannot judge by name: Encrypted Client Hello (only the outer, public name
 * is in clear), HTTP/2 cleartext (an `Upgrade: h2c` or the prior-knowledge preface: later
 * streams name other hosts), a ClientHello it cannot reassemble within its bounds.
 */
export type Unreadable = 'ech' | 'h2c' | 'hello';

/** Bounds: a guest can hold neither many sockets nor idle ones, nor make the proxy buffer. */
const MAX_CONNECTIONS = 128;
const PEEK_MS = 5000;
const IDLE_MS = 300_000;
const MAX_PEEK = 16 * 1024;
/** TLS extension types the proxy looks for. */
const EXT_SERVER_NAME = 0x0000;
const EXT_ECH = 0xfe0d;
const EXT_ECH_OUTER = 0xfd00;

const HOSTNAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/;

/** A name as policies see it (lower case, no trailing dot), or undefined for IPs and junk. */
function cleanName(raw: string): string | undefined {
  const name = raw.trim().toLowerCase().replace(/\.$/, '');
  if (name.length === 0 || name.length > 253 || !HOSTNAME.test(name)) return undefined;
  return /^[\d.]+$/.test(name) ? undefined : name;
}

/** The server_name in a server_name extension's data, bounds-checked. */
function serverName(ext: Buffer): string | undefined {
  // server_name_list: its length, then (type 0 = host_name, length, name)
  if (ext.length < 5 || ext[2] !== 0) return undefined;
  const nameLen = ext.readUInt16BE(3);
  if (5 + nameLen > ext.length) return undefined;
  return cleanName(ext.toString('latin1', 5, 5 + nameLen));
}

/** A whole ClientHello message (from its handshake header): its name, or why it has none. */
function helloOf(hello: Buffer): Peeked {
  let off = 4 + 2 + 32; // handshake header, client_version, random
  const skip = (lenBytes: 1 | 2) => {
    if (off + lenBytes > hello.length) return false;
    off += lenBytes + (lenBytes === 1 ? (hello[off] as number) : hello.readUInt16BE(off));
    return off <= hello.length;
  };
  if (!skip(1) || !skip(2) || !skip(1) || off + 2 > hello.length) return { proto: 'tls' };
  const end = Math.min(hello.length, off + 2 + hello.readUInt16BE(off));
  off += 2;
  let name: string | undefined;
  while (off + 4 <= end) {
    const type = hello.readUInt16BE(off);
    const len = hello.readUInt16BE(off + 2);
    const data = off + 4;
    off = data + len;
    if (off > end) break;
    if (type === EXT_ECH || type === EXT_ECH_OUTER) return { proto: 'tls', unreadable: 'ech' };
    if (type === EXT_SERVER_NAME && name === undefined) {
      name = serverName(hello.subarray(data, off));
    }
  }
  return name === undefined ? { proto: 'tls' } : { proto: 'tls', name };
}

/**
 * TLS records carrying a ClientHello, reassembled across records (a client may send it in
 * many, down to one byte each): its name once the message is whole. A record of another
 * type first, or a message past {@link MAX_PEEK}, is unreadable.
 */
function peekTls(buf: Buffer): Peeked | undefined {
  const fragments: Buffer[] = [];
  let have = 0;
  let need = 0; // the message's whole length, once its 4-byte header is in
  let off = 0;
  while (off + 5 <= buf.length) {
    if (buf[off] !== 0x16 || buf[off + 1] !== 0x03) return { proto: 'tls', unreadable: 'hello' };
    const len = buf.readUInt16BE(off + 3);
    if (off + 5 + len > buf.length) break;
    fragments.push(buf.subarray(off + 5, off + 5 + len));
    have += len;
    off += 5 + len;
    if (need === 0 && have >= 4) {
      const header = Buffer.concat(fragments).subarray(0, 4);
      if (header[0] !== 0x01) return { proto: 'tls' };
      need = 4 + header.readUIntBE(1, 3);
      if (need > MAX_PEEK) return { proto: 'tls', unreadable: 'hello' };
    }
    if (need > 0 && have >= need) return helloOf(Buffer.concat(fragments).subarray(0, need));
  }
  return buf.length >= MAX_PEEK ? { proto: 'tls', unreadable: 'hello' } : undefined;
}

/** HTTP/2's prior-knowledge preface starts like a request line with method PRI. */
const H2_PREFACE = 'PRI * HTTP/2.0';

/** An HTTP/1 request: its Host once the headers are whole; h2c is unreadable. */
function peekHttp(buf: Buffer): Peeked | undefined {
  const text = buf.toString('latin1');
  if (text.startsWith(H2_PREFACE.slice(0, Math.min(text.length, H2_PREFACE.length)))) {
    return text.length < H2_PREFACE.length ? undefined : { proto: 'http', unreadable: 'h2c' };
  }
  const end = text.search(/\r?\n\r?\n/);
  if (end < 0) return buf.length < MAX_PEEK ? undefined : { proto: 'http' };
  const headers = text.slice(0, end);
  if (/^upgrade:[^\r\n]*\bh2c\b/im.test(headers)) return { proto: 'http', unreadable: 'h2c' };
  const host = /^host:[ \t]*([^\r\n]*)/im.exec(headers)?.[1] ?? '';
  const bare = host.startsWith('[') ? '' : host.replace(/:\d*$/, '');
  return { proto: 'http', name: cleanName(bare) };
}

/**
 * What the first bytes of a connection say, or undefined while more are needed: TLS
 * (a handshake record), HTTP (a method token and a space), else neither (no name).
 */
export function peekName(buf: Buffer): Peeked | undefined {
  if (buf.length === 0) return undefined;
  if (buf[0] === 0x16) return buf.length < 2 || buf[1] === 0x03 ? peekTls(buf) : { proto: 'other' };
  const head = buf.toString('latin1', 0, Math.min(buf.length, 12));
  if (/^[A-Z]{1,10} /.test(head)) return peekHttp(buf);
  return /^[A-Z]{1,10}$/.test(head) && buf.length < 12 ? undefined : { proto: 'other' };
}

/**
 * The original destination of a redirected TCP connection from `from` to `proxy`, in the
 * text of a conntrack table (`/proc/net/nf_conntrack` lines: the original tuple, then the
 * reply's, each `src= dst= sport= dport=`).
 */
export function originalFrom(table: string, from: Endpoint, proxy: Endpoint): Endpoint | undefined {
  for (const line of table.split('\n')) {
    if (!line.includes(' tcp ') || !line.includes(`sport=${from.port} `)) continue;
    const v = (key: string) =>
      [...line.matchAll(new RegExp(` ${key}=(\\S+)`, 'g'))].map((m) => m[1]);
    const [src, rsrc] = v('src');
    const [sport, rsport] = v('sport');
    const [dst] = v('dst');
    const [dport] = v('dport');
    if (src !== from.host || sport !== String(from.port)) continue;
    if (rsrc !== proxy.host || rsport !== String(proxy.port) || !dst) continue;
    return { host: dst, port: Number(dport) };
  }
  return undefined;
}

/** {@link originalFrom} in the conntrack table of the namespace process `pid` runs in. */
export async function conntrackOriginal(
  pid: number,
  from: Endpoint,
  proxy: Endpoint,
): Promise<Endpoint | undefined> {
  return originalFrom(await readFile(`/proc/${pid}/net/nf_conntrack`, 'latin1'), from, proxy);
}

/** Read until the client has said its name (bounded in bytes and time). */
function peek(c: Socket): Promise<{ peeked: Peeked; head: Buffer }> {
  return new Promise((resolve) => {
    let head = Buffer.alloc(0);
    const done = (peeked: Peeked) => {
      clearTimeout(timer);
      c.off('data', onData);
      c.pause();
      resolve({ peeked, head });
    };
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const p = peekName(head) ?? (head.length >= MAX_PEEK ? { proto: 'other' } : undefined);
      if (p) done(p);
    };
    // A client that waits for the server to speak first (SSH, SMTP) has no name to give; a
    // ClientHello still incomplete by then is one the proxy cannot read.
    const timer = setTimeout(
      () => done(head[0] === 0x16 ? { proto: 'tls', unreadable: 'hello' } : { proto: 'other' }),
      PEEK_MS,
    );
    c.on('data', onData);
  });
}

/** Join the client to where it was going, with what was peeked sent first. */
function splice(c: Socket, to: Endpoint, head: Buffer): void {
  const up = connect(to.port, to.host);
  const end = () => {
    c.destroy();
    up.destroy();
  };
  up.once('connect', () => {
    up.write(head);
    c.pipe(up).pipe(c);
    c.resume();
  });
  up.on('error', () => (c.destroyed ? up.destroy() : c.resetAndDestroy()));
  up.setTimeout(IDLE_MS, end);
  c.on('close', () => up.destroy());
  up.on('close', () => c.destroyed || c.end());
}

/**
 * The caller's verdict on a peeked connection: where to splice it (the address the caller
 * checked the name against), or undefined to reset it.
 */
export type NameDecider = (peeked: Peeked, to: Endpoint) => Promise<Endpoint | undefined>;

/**
 * One sandbox's name proxy: the connections its namespace steered to the host end of its
 * veth (on the DNS port, see {@link NameProxy.serve}), each judged by its name and then
 * spliced or reset.
 */
export class NameProxy {
  private readonly clients = new Set<Socket>();

  constructor(private readonly decide: NameDecider) {}

  /**
   * Judge and carry a steered connection going to `to`: peek its name, then splice it there
   * or reset it. Over {@link MAX_CONNECTIONS} at once, it is reset unread.
   */
  serve(c: Socket, to: Endpoint): void {
    if (this.clients.size >= MAX_CONNECTIONS) return void c.resetAndDestroy();
    this.clients.add(c);
    c.on('close', () => this.clients.delete(c));
    c.on('error', () => c.destroy());
    c.setTimeout(IDLE_MS, () => c.destroy());
    void peek(c)
      .then(async ({ peeked, head }) => {
        if (c.destroyed) return;
        const target = await this.decide(peeked, to);
        if (c.destroyed) return;
        if (!target) return void c.resetAndDestroy();
        splice(c, target, head);
      })
      .catch(() => c.resetAndDestroy());
  }

  /** Connections open now (spliced or being peeked). */
  get connections(): number {
    return this.clients.size;
  }

  close(): void {
    for (const c of this.clients) c.destroy();
  }
}

/** Most connections one sandbox's name proxy holds at once. */
export const NAME_PROXY_MAX = MAX_CONNECTIONS;
