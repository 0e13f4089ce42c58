/**
 * The name proxy's mechanics: web connections a sandbox's namespace steers to the host end
 * of its veth (those no address rule decided, when the policy names hostnames). It peeks
 * the name the client sends first (the TLS ClientHello's SNI, or the HTTP request's
 * `Host`), asks the caller whether that name may pass, and then either splices the
 * connection to where it was going or resets it. Where it was going comes from the
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

/** What the client sent first: the protocol it spoke and the name in it (if any). */
export interface Peeked {
  proto: 'tls' | 'http' | 'other';
  name?: string;
}

/** Bounds: a guest can hold neither many sockets nor idle ones, nor make the proxy buffer. */
const MAX_CONNECTIONS = 128;
const PEEK_MS = 5000;
const IDLE_MS = 300_000;
const MAX_PEEK = 16 * 1024;

const HOSTNAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/;

/** A name as policies see it (lower case, no trailing dot), or undefined for IPs and junk. */
function cleanName(raw: string): string | undefined {
  const name = raw.trim().toLowerCase().replace(/\.$/, '');
  if (name.length === 0 || name.length > 253 || !HOSTNAME.test(name)) return undefined;
  return /^[\d.]+$/.test(name) ? undefined : name;
}

/** The server_name of a ClientHello's extensions, bounds-checked; undefined when absent. */
function sniOf(hello: Buffer): string | undefined {
  let off = 4 + 2 + 32; // handshake header, client_version, random
  const skip = (lenBytes: 1 | 2) => {
    if (off + lenBytes > hello.length) return false;
    off += lenBytes + (lenBytes === 1 ? (hello[off] as number) : hello.readUInt16BE(off));
    return off <= hello.length;
  };
  if (!skip(1) || !skip(2) || !skip(1) || off + 2 > hello.length) return undefined;
  const end = Math.min(hello.length, off + 2 + hello.readUInt16BE(off));
  off += 2;
  while (off + 4 <= end) {
    const type = hello.readUInt16BE(off);
    const len = hello.readUInt16BE(off + 2);
    const data = off + 4;
    off = data + len;
    if (type !== 0 || off > end || len < 5) continue;
    // server_name_list: its length, then (type 0 = host_name, length, name)
    if (hello[data + 2] !== 0) return undefined;
    const nameLen = hello.readUInt16BE(data + 3);
    if (data + 5 + nameLen > off) return undefined;
    return cleanName(hello.toString('latin1', data + 5, data + 5 + nameLen));
  }
  return undefined;
}

/** A TLS record carrying a ClientHello: its name once the record is whole. */
function peekTls(buf: Buffer): Peeked | undefined {
  if (buf.length < 5) return undefined;
  const len = buf.readUInt16BE(3);
  if (buf.length < 5 + len && buf.length < MAX_PEEK) return undefined;
  const hello = buf.subarray(5, 5 + len);
  if (hello[0] !== 0x01) return { proto: 'tls' };
  return { proto: 'tls', name: sniOf(hello) };
}

/** An HTTP/1 request: its Host once the headers are whole. */
function peekHttp(buf: Buffer): Peeked | undefined {
  const text = buf.toString('latin1');
  const end = text.search(/\r?\n\r?\n/);
  if (end < 0) return buf.length < MAX_PEEK ? undefined : { proto: 'http' };
  const host = /^host:[ \t]*([^\r\n]*)/im.exec(text.slice(0, end))?.[1] ?? '';
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
    // A client that waits for the server to speak first (SSH, SMTP) has no name to give.
    const timer = setTimeout(() => done({ proto: 'other' }), PEEK_MS);
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
 * One sandbox's name proxy: the connections its namespace steered to the host end of its
 * veth (on the DNS port, see {@link NameProxy.serve}), each judged by its name and then
 * spliced or reset.
 */
export class NameProxy {
  private readonly clients = new Set<Socket>();

  constructor(private readonly decide: (peeked: Peeked, to: Endpoint) => boolean) {}

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
    void peek(c).then(({ peeked, head }) => {
      if (c.destroyed) return;
      if (!this.decide(peeked, to)) return void c.resetAndDestroy();
      splice(c, to, head);
    });
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
