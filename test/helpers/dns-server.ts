/**
 * A test DNS server over UDP: A records from a table, NXDOMAIN for any other name, and the
 * names it was asked, in order. The world's server runs one in its namespace (world-server.ts);
 * a test can run one on loopback as a daemon's `--dns-upstream`.
 */
import { createSocket } from 'node:dgram';

export interface DnsServer {
  port: number;
  /** The names asked so far, lower case. */
  asked: string[];
  close(): Promise<void>;
}

/** The name of the first question, lower case, and the offset after its type and class. */
function questionName(msg: Buffer): { name: string; end: number } {
  const labels: string[] = [];
  let off = 12;
  while (off < msg.length && msg[off] !== 0) {
    const len = msg[off] as number;
    labels.push(msg.toString('latin1', off + 1, off + 1 + len));
    off += 1 + len;
  }
  return { name: labels.join('.').toLowerCase(), end: off + 5 };
}

/** The answer to `msg` from `records` (name → IPv4 address). */
function reply(msg: Buffer, name: string, end: number, records: Map<string, string>): Buffer {
  const type = msg.readUInt16BE(end - 4);
  const ip = records.get(name);
  const head = Buffer.from(msg.subarray(0, end));
  head[2] = 0x84 | ((msg[2] as number) & 0x01); // response, authoritative, RD copied
  head[3] = ip ? 0x00 : 0x03; // NXDOMAIN when unknown
  head.writeUInt16BE(ip && type === 1 ? 1 : 0, 6);
  head.fill(0, 8, 12);
  if (!ip || type !== 1) return head;
  const rr = Buffer.alloc(16);
  rr.writeUInt16BE(0xc00c, 0); // the question's name
  rr.writeUInt16BE(1, 2);
  rr.writeUInt16BE(1, 4);
  rr.writeUInt32BE(30, 6);
  rr.writeUInt16BE(4, 10);
  ip.split('.').forEach((b, i) => (rr[12 + i] = Number(b)));
  return Buffer.concat([head, rr]);
}

/** Serve `records` on `host:port` (port 0: a free one). */
export function serveDns(
  records: Record<string, string>,
  at: { host: string; port: number },
): Promise<DnsServer> {
  const table = new Map(Object.entries(records));
  const sock = createSocket('udp4');
  const asked: string[] = [];
  sock.on('message', (msg, from) => {
    const { name, end } = questionName(msg);
    asked.push(name);
    sock.send(reply(msg, name, end, table), from.port, from.address);
  });
  return new Promise((resolve, reject) => {
    sock.once('error', reject);
    sock.bind(at.port, at.host, () =>
      resolve({
        port: sock.address().port,
        asked,
        close: () => new Promise<void>((done) => sock.close(() => done())),
      }),
    );
  });
}
