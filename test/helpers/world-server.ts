/**
 * The test "outside world", run by world.ts inside a network namespace the test made: an
 * HTTP server on :80 and the same over TLS on :443 (`/hello`, `/bytes?mb=N` streaming N MiB
 * of zeros; the key and certificate world.ts made are in WORLD_TLS_KEY / WORLD_TLS_CERT)
 * and a DNS server on :53 answering A records from argv (`name=ip` …), NXDOMAIN for
 * anything else.
 */
import { createSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';

const records = new Map(process.argv.slice(2).map((kv) => kv.split('=') as [string, string]));

const CHUNK = Buffer.alloc(64 * 1024);

function serve(req: IncomingMessage, res: ServerResponse) {
  const url = new URL(req.url ?? '/', 'http://world');
  if (url.pathname === '/hello') return res.end(`hello from ${req.headers.host}\n`);
  if (url.pathname === '/bytes') {
    let left = Math.min(Number(url.searchParams.get('mb') ?? 1), 1024) * 1024 * 1024;
    res.writeHead(200, { 'content-length': String(left) });
    const pump = () => {
      while (left > 0) {
        const n = Math.min(left, CHUNK.length);
        left -= n;
        if (!res.write(CHUNK.subarray(0, n))) return void res.once('drain', pump);
      }
      res.end();
    };
    return pump();
  }
  res.statusCode = 404;
  res.end('not found\n');
}

createServer(serve).listen(80, '0.0.0.0');
const tls = { key: process.env.WORLD_TLS_KEY, cert: process.env.WORLD_TLS_CERT };
if (tls.key && tls.cert) {
  // The guests' client is busybox 1.35's wget: its TLS 1.2 ClientHello has no
  // signature_algorithms extension, so the server must sign with SHA-1 (RFC 5246 §7.4.1.4.1),
  // which OpenSSL 3 refuses from security level 1 up ("no suitable signature algorithm",
  // alert 40). Level 0 lets this test server talk to it; nothing else changes.
  const opts = { key: readFileSync(tls.key), cert: readFileSync(tls.cert) };
  createTlsServer({ ...opts, ciphers: 'DEFAULT:@SECLEVEL=0' }, serve).listen(443, '0.0.0.0');
}

/** The name of the first question, lower case. */
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

const dns = createSocket('udp4');
dns.on('message', (msg, from) => {
  const { name, end } = questionName(msg);
  const type = msg.readUInt16BE(end - 4);
  const ip = records.get(name);
  const head = Buffer.from(msg.subarray(0, end));
  head[2] = 0x84 | ((msg[2] as number) & 0x01); // response, authoritative, RD copied
  head[3] = ip ? 0x00 : 0x03; // NXDOMAIN when unknown
  head.writeUInt16BE(ip && type === 1 ? 1 : 0, 6);
  head.fill(0, 8, 12);
  if (!ip || type !== 1) return dns.send(head, from.port, from.address);
  const rr = Buffer.alloc(16);
  rr.writeUInt16BE(0xc00c, 0); // the question's name
  rr.writeUInt16BE(1, 2);
  rr.writeUInt16BE(1, 4);
  rr.writeUInt32BE(30, 6);
  rr.writeUInt16BE(4, 10);
  ip.split('.').forEach((b, i) => (rr[12 + i] = Number(b)));
  dns.send(Buffer.concat([head, rr]), from.port, from.address);
});
dns.bind(53, '0.0.0.0', () => process.stdout.write('ready\n'));
