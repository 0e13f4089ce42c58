/**
 * The DNS proxy's mechanics: a UDP socket and a TCP listener at the host end of each
 * sandbox's veth (every query of the guest is redirected there by its namespace's filter),
 * DNS over TCP's framing (a 2-byte length before each message), just enough of the
 * DNS wire format to read the question and the A records of an answer, a REFUSED reply,
 * forwarding to the upstream resolver (the host's, or the address the daemon was given:
 * `parseDnsUpstream`), and the daemon's own A lookups there (`resolveA`). What to do with a name is the caller's call.
 */
import { createSocket, type Socket } from 'node:dgram';
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, isIP, type Server, type Socket as TcpSocket } from 'node:net';
import { ForkdError } from '../../errors.js';

export interface DnsQuestion {
  id: number;
  /** Lower case, no trailing dot. */
  name: string;
  type: number;
}

export interface DnsEndpoint {
  host: string;
  port: number;
}

const HEADER = 12;
const TYPE_A = 1;
const RCODE_REFUSED = 5;
const MAX_POINTERS = 32;

/** Read a (possibly compressed) name at `off`; returns it and the offset after it. */
function readName(msg: Buffer, off: number): { name: string; next: number } | undefined {
  const labels: string[] = [];
  let next = -1;
  for (let hops = 0; hops < MAX_POINTERS; hops++) {
    if (off >= msg.length) return undefined;
    const len = msg[off] as number;
    if (len === 0) return { name: labels.join('.').toLowerCase(), next: next < 0 ? off + 1 : next };
    if ((len & 0xc0) === 0xc0) {
      if (off + 1 >= msg.length) return undefined;
      if (next < 0) next = off + 2;
      off = ((len & 0x3f) << 8) | (msg[off + 1] as number);
      continue;
    }
    if (off + 1 + len > msg.length) return undefined;
    labels.push(msg.toString('latin1', off + 1, off + 1 + len));
    off += 1 + len;
  }
  return undefined;
}

/** The first question of a query, or undefined when the packet is not one we understand. */
export function parseQuestion(msg: Buffer): DnsQuestion | undefined {
  if (msg.length < HEADER + 5 || msg.readUInt16BE(4) < 1) return undefined;
  const q = readName(msg, HEADER);
  if (!q || q.next + 4 > msg.length) return undefined;
  return { id: msg.readUInt16BE(0), name: q.name, type: msg.readUInt16BE(q.next) };
}

/** The IPv4 addresses an answer carries (its CNAME chain included) and their lowest TTL. */
export function answerAddresses(msg: Buffer): { ips: string[]; ttlS: number } {
  const ips: string[] = [];
  let ttlS = Infinity;
  if (msg.length < HEADER) return { ips, ttlS: 0 };
  let off = HEADER;
  for (let i = msg.readUInt16BE(4); i > 0; i--) {
    const q = readName(msg, off);
    if (!q) return { ips, ttlS: 0 };
    off = q.next + 4;
  }
  for (let i = msg.readUInt16BE(6); i > 0; i--) {
    const rr = readName(msg, off);
    if (!rr || rr.next + 10 > msg.length) break;
    const type = msg.readUInt16BE(rr.next);
    const ttl = msg.readUInt32BE(rr.next + 4);
    const len = msg.readUInt16BE(rr.next + 8);
    const data = rr.next + 10;
    if (data + len > msg.length) break;
    if (type === TYPE_A && len === 4) {
      ips.push([...msg.subarray(data, data + 4)].join('.'));
      ttlS = Math.min(ttlS, ttl);
    }
    off = data + len;
  }
  return { ips, ttlS: ips.length ? ttlS : 0 };
}

/** A REFUSED answer to `query`: its header and question, no records. */
export function refusedReply(query: Buffer): Buffer {
  const q = readName(query, HEADER);
  const end = q ? Math.min(q.next + 4, query.length) : HEADER;
  const reply = Buffer.from(query.subarray(0, end));
  reply[2] = ((reply[2] as number) | 0x80) & ~0x04; // QR, keep opcode and RD; not authoritative
  reply[3] = ((reply[3] as number) & 0x70) | 0x80 | RCODE_REFUSED; // RA
  reply.writeUInt16BE(q ? 1 : 0, 4);
  reply.fill(0, 6, 12);
  return reply;
}

/** Send a query upstream and wait for the answer with the same id (bounded in time). */
export function forwardQuery(
  query: Buffer,
  upstream: DnsEndpoint,
  timeoutMs = 3000,
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const sock = createSocket(upstream.host.includes(':') ? 'udp6' : 'udp4');
    const done = (err?: Error, answer?: Buffer) => {
      clearTimeout(timer);
      sock.close();
      if (err) reject(err);
      else resolve(answer as Buffer);
    };
    const timer = setTimeout(() => done(new Error('upstream DNS timed out')), timeoutMs);
    sock.on('error', (e) => done(e));
    sock.on('message', (answer) => {
      if (answer.length >= 2 && answer.readUInt16BE(0) === query.readUInt16BE(0)) {
        done(undefined, answer);
      }
    });
    sock.send(query, upstream.port, upstream.host);
  });
}

/** A recursive query for the A records of `name` (the daemon's own lookups). */
export function queryFor(name: string, id = randomInt(0, 0x10000)): Buffer {
  const labels = name.split('.').filter((l) => l.length > 0);
  const parts = labels.map((l) => Buffer.concat([Buffer.of(l.length), Buffer.from(l, 'latin1')]));
  const head = Buffer.alloc(HEADER);
  head.writeUInt16BE(id, 0);
  head[2] = 0x01; // RD
  head.writeUInt16BE(1, 4);
  return Buffer.concat([head, ...parts, Buffer.of(0, 0, TYPE_A, 0, 1)]);
}

/** The IPv4 addresses `name` has at `upstream`, and their TTL (asked by the daemon). */
export async function resolveA(
  name: string,
  upstream: DnsEndpoint,
): Promise<{ ips: string[]; ttlS: number }> {
  return answerAddresses(await forwardQuery(queryFor(name), upstream));
}

const DNS_PORT = 53;

/**
 * An upstream resolver as typed: `ADDR` or `ADDR:PORT`, an IPv6 address in brackets with a
 * port (`[::1]:53`) or bare without (`::1`); port 53 when none. Only an address: a name
 * would need a resolver to find the resolver. `what` names the flag or variable in errors.
 */
export function parseDnsUpstream(text: string, what = '--dns-upstream'): DnsEndpoint {
  const t = text.trim();
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(t) ?? /^([^:]+)(?::(\d+))?$/.exec(t);
  const host = m ? (m[1] as string) : t;
  const port = m?.[2] === undefined ? DNS_PORT : Number(m[2]);
  if (isIP(host) !== 0 && port >= 1 && port <= 65535) {
    return { host, port };
  }
  throw new ForkdError(
    'bad_request',
    `${what} "${text}" is not a resolver address: give an IP address and optionally a port, ` +
      'e.g. 192.0.2.53, 127.0.0.1:5353 or [2001:db8::53]:53',
    { field: what, value: text },
  );
}

/**
 * The daemon's upstream: `--dns-upstream` as typed, else FORKD_DNS_UPSTREAM, else none (the
 * host's resolver, read at each query).
 */
export function dnsUpstreamSetting(
  flag: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): DnsEndpoint | undefined {
  if (flag !== undefined) return parseDnsUpstream(flag);
  const set = env.FORKD_DNS_UPSTREAM;
  return set ? parseDnsUpstream(set, 'FORKD_DNS_UPSTREAM') : undefined;
}

/** The host's resolver: the first nameserver of /etc/resolv.conf. */
export function systemResolver(): DnsEndpoint | undefined {
  try {
    const text = readFileSync('/etc/resolv.conf', 'utf8');
    const m = /^\s*nameserver\s+(\S+)/m.exec(text);
    return m ? { host: m[1] as string, port: DNS_PORT } : undefined;
  } catch {
    return undefined;
  }
}

/** What the proxy does with one query: the reply to send back, or nothing. */
export type DnsHandler = (query: Buffer, q: DnsQuestion) => Promise<Buffer | undefined>;

/** TCP clients per listener, and how long one may sit idle (a guest cannot hold sockets). */
const TCP_MAX_CLIENTS = 16;
const TCP_IDLE_MS = 10_000;

/** Answer one query (REFUSED when the handler fails); undefined for a packet we do not read. */
async function reply(msg: Buffer, handler: DnsHandler): Promise<Buffer | undefined> {
  const q = parseQuestion(msg);
  if (!q) return undefined;
  return handler(msg, q).catch(() => refusedReply(msg));
}

/**
 * Split a TCP stream into DNS messages (RFC 1035 4.2.2: each after its 2-byte length),
 * calling `onMessage` for each complete one; returns what is left over.
 */
export function takeFrames(buf: Buffer, onMessage: (msg: Buffer) => void): Buffer {
  let off = 0;
  while (buf.length - off >= 2) {
    const len = buf.readUInt16BE(off);
    if (buf.length - off - 2 < len) break;
    onMessage(buf.subarray(off + 2, off + 2 + len));
    off += 2 + len;
  }
  return buf.subarray(off);
}

/** One message framed for TCP. */
export function frame(msg: Buffer): Buffer {
  const len = Buffer.alloc(2);
  len.writeUInt16BE(msg.length);
  return Buffer.concat([len, msg]);
}

function serveTcp(c: TcpSocket, handler: DnsHandler): void {
  let pending: Buffer = Buffer.alloc(0);
  c.setTimeout(TCP_IDLE_MS, () => c.destroy());
  c.on('data', (chunk) => {
    pending = takeFrames(Buffer.concat([pending, chunk]), (msg) => {
      void reply(Buffer.from(msg), handler).then((r) => {
        if (r && !c.destroyed) c.write(frame(r));
      });
    });
  });
}

/**
 * Connections of the TCP listener that are not DNS (the name proxy's): `take` serves one
 * and says true, or says false and it is answered as DNS; at most `max` of them besides
 * the DNS clients.
 */
export interface TcpDivert {
  take(c: TcpSocket): Promise<boolean>;
  max: number;
}

/** One UDP socket and one TCP listener on the same address, answering through `handler`. */
export class DnsListener {
  private constructor(
    private readonly sock: Socket,
    private readonly tcp: Server,
    private readonly clients: Set<TcpSocket>,
  ) {}

  static async listen(
    at: DnsEndpoint,
    handler: DnsHandler,
    divert?: TcpDivert,
  ): Promise<DnsListener> {
    const sock = await listenUdp(at, handler);
    const clients = new Set<TcpSocket>();
    try {
      // Port 0 (tests): TCP takes the port UDP got.
      const port = at.port || sock.address().port;
      const tcp = await listenTcp({ ...at, port }, handler, clients, divert);
      return new DnsListener(sock, tcp, clients);
    } catch (e) {
      sock.close();
      throw e;
    }
  }

  /** The port both listen on (the one asked, or the one UDP got for port 0). */
  get port(): number {
    return this.sock.address().port;
  }

  close(): void {
    this.sock.close();
    this.tcp.close();
    for (const c of this.clients) c.destroy();
  }
}

function listenUdp(at: DnsEndpoint, handler: DnsHandler): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const sock = createSocket('udp4');
    sock.once('error', reject);
    sock.on('message', (msg, from) => {
      void reply(msg, handler).then((r) => r && sock.send(r, from.port, from.address));
    });
    sock.bind(at.port, at.host, () => {
      sock.off('error', reject);
      sock.on('error', () => undefined);
      resolve(sock);
    });
  });
}

function listenTcp(
  at: DnsEndpoint,
  handler: DnsHandler,
  clients: Set<TcpSocket>,
  divert?: TcpDivert,
): Promise<Server> {
  let dnsClients = 0;
  const asDns = (c: TcpSocket) => {
    if (c.destroyed) return;
    if (dnsClients >= TCP_MAX_CLIENTS) return void c.destroy();
    dnsClients++;
    c.on('close', () => dnsClients--);
    serveTcp(c, handler);
  };
  return new Promise((resolve, reject) => {
    const server = createServer((c) => {
      clients.add(c);
      c.on('close', () => clients.delete(c));
      c.on('error', () => c.destroy());
      if (!divert) return asDns(c);
      // Unread bytes wait in the socket while `take` finds out what the connection is.
      void divert.take(c).then(
        (taken) => taken || asDns(c),
        () => asDns(c),
      );
    });
    server.maxConnections = TCP_MAX_CLIENTS + (divert?.max ?? 0);
    server.once('error', reject);
    server.listen(at.port, at.host, () => {
      server.off('error', reject);
      server.on('error', () => undefined);
      resolve(server);
    });
  });
}
