/**
 * The test "outside world", run by world.ts inside a network namespace the test made: an
 * HTTP server on :80 and the same over TLS on :443 (`/hello`, `/bytes?mb=N` streaming N MiB
 * of zeros; the key and certificate world.ts made are in WORLD_TLS_KEY / WORLD_TLS_CERT)
 * a DNS server on :53 answering A records from argv (`name=ip` …), NXDOMAIN for
 * anything else (dns-server.ts), and on UDP :443 (where QUIC would be) a one-block TFTP
 * read answer, `udp 443 answered`, so busybox's `tftp` in a guest shows whether a datagram
 * got through.
 */
import { createSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { serveDns } from './dns-server.js';

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

const TFTP_RRQ = 1;
const udp = createSocket('udp4');
udp.on('message', (msg, from) => {
  if (msg.length < 2 || msg.readUInt16BE(0) !== TFTP_RRQ) return; // the client's ACK
  const data = Buffer.concat([Buffer.of(0, 3, 0, 1), Buffer.from('udp 443 answered\n')]);
  udp.send(data, from.port, from.address);
});
udp.bind(443, '0.0.0.0');

const records = Object.fromEntries(process.argv.slice(2).map((kv) => kv.split('=')));
void serveDns(records, { host: '0.0.0.0', port: 53 }).then(() => process.stdout.write('ready\n'));
