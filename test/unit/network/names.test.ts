/**
 * The name proxy without a sandbox: the name in a real ClientHello (Node's TLS client) and
 * in an HTTP request, what is neither, the original destination from a conntrack line, a
 * proxy on loopback splicing an allowed name and resetting a refused one, and the DNS
 * proxy's TCP port handing it steered connections while answering DNS clients.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Server } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { DnsListener, frame, refusedReply } from '../../../src/drivers/net/dns.js';
import {
  NameProxy,
  originalFrom,
  peekName,
  type Endpoint,
} from '../../../src/drivers/net/names.js';

async function listening(server: Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

/** The first bytes Node's TLS client sends (its ClientHello) for `servername`. */
async function clientHello(servername: string): Promise<Buffer> {
  const got = new Promise<Buffer>((resolve) => {
    const server = createServer((c) =>
      c.once('data', (b: Buffer) => {
        resolve(b);
        c.destroy();
        server.close();
      }),
    );
    void listening(server).then((port) => {
      tlsConnect({ port, host: '127.0.0.1', servername }).on('error', () => undefined);
    });
  });
  return got;
}

test('the SNI of a real ClientHello; incomplete records wait; no SNI is a TLS without name', async () => {
  const hello = await clientHello('Api.Example.Test');
  assert.deepEqual(peekName(hello), { proto: 'tls', name: 'api.example.test' });
  assert.equal(peekName(hello.subarray(0, 40)), undefined);
  const noSni = Buffer.from(hello);
  noSni[5] = 0x02; // not a ClientHello
  assert.deepEqual(peekName(noSni), { proto: 'tls' });
});

/** `hello` (whole TLS records) re-cut into records of `size` bytes of handshake each. */
function recut(hello: Buffer, size: number): Buffer {
  const msg = hello.subarray(5, 5 + hello.readUInt16BE(3));
  const out: Buffer[] = [];
  for (let i = 0; i < msg.length; i += size) {
    const part = msg.subarray(i, i + size);
    const head = Buffer.of(0x16, 0x03, 0x01, 0, 0);
    head.writeUInt16BE(part.length, 3);
    out.push(head, part);
  }
  return Buffer.concat(out);
}

test('a ClientHello in 1-byte records, or fed 1 byte at a time, is reassembled; past the bound it is unreadable', async () => {
  const hello = await clientHello('allowed.test');
  const split = recut(hello, 1);
  assert.ok(split.length > 5 * hello.length, 'every byte is its own record');
  assert.deepEqual(peekName(split), { proto: 'tls', name: 'allowed.test' });
  // As a proxy reading 1-byte TCP segments sees it: undecided until the last byte.
  for (let n = 1; n < split.length; n += 7) assert.equal(peekName(split.subarray(0, n)), undefined);
  // A handshake message that claims more than the proxy buffers, or a record of another type.
  const huge = Buffer.from(hello);
  huge.writeUIntBE(0x010000, 6, 3);
  assert.deepEqual(peekName(huge), { proto: 'tls', unreadable: 'hello' });
  const alert = Buffer.concat([
    Buffer.of(0x16, 0x03, 0x01, 0, 1, 0x01),
    Buffer.of(0x15, 0x03, 0x03, 0, 2, 2, 40),
  ]);
  assert.deepEqual(peekName(alert), { proto: 'tls', unreadable: 'hello' });
});

test('ECH and h2c (upgrade or prior knowledge) are unreadable', async () => {
  const hello = await clientHello('public.test');
  // Append an encrypted_client_hello extension (0xfe0d) and fix up every length around it.
  const ech = Buffer.of(0xfe, 0x0d, 0, 4, 0, 1, 2, 3);
  const body = hello.subarray(5);
  const withEch = Buffer.concat([hello.subarray(0, 5), body, ech]);
  withEch.writeUInt16BE(hello.readUInt16BE(3) + ech.length, 3);
  withEch.writeUIntBE(body.readUIntBE(1, 3) + ech.length, 6, 3);
  const extLenAt = 5 + extensionsOffset(body);
  withEch.writeUInt16BE(withEch.readUInt16BE(extLenAt) + ech.length, extLenAt);
  assert.deepEqual(peekName(withEch), { proto: 'tls', unreadable: 'ech' });
  const upgrade =
    'GET / HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n';
  assert.deepEqual(peekName(Buffer.from(upgrade)), { proto: 'http', unreadable: 'h2c' });
  const preface = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
  assert.deepEqual(peekName(preface), { proto: 'http', unreadable: 'h2c' });
  assert.equal(peekName(preface.subarray(0, 6)), undefined);
});

/** Where a ClientHello message's extensions length sits (after its variable fields). */
function extensionsOffset(msg: Buffer): number {
  let off = 4 + 2 + 32;
  off += 1 + (msg[off] as number);
  off += 2 + msg.readUInt16BE(off);
  off += 1 + (msg[off] as number);
  return off;
}

test('the Host of an HTTP request (port and case dropped); IPs and other protocols have none', () => {
  const req = (host: string) =>
    Buffer.from(`GET / HTTP/1.1\r\nUser-Agent: x\r\nHost: ${host}\r\n\r\n`);
  assert.deepEqual(peekName(req('A.Test:8080')), { proto: 'http', name: 'a.test' });
  assert.deepEqual(peekName(req('198.51.100.2')), { proto: 'http', name: undefined });
  assert.equal(peekName(Buffer.from('GET / HTTP/1.1\r\nHost: a.te')), undefined);
  assert.deepEqual(peekName(Buffer.from('SSH-2.0-OpenSSH_9.2\r\n')), { proto: 'other' });
  assert.equal(peekName(Buffer.from('GE')), undefined);
});

test('the original destination of a redirected connection, from conntrack lines', () => {
  const table = [
    'ipv4     2 udp      17 20 src=10.231.0.2 dst=10.231.0.1 sport=40001 dport=53 src=10.231.0.1 dst=10.231.0.2 sport=53 dport=40001 mark=0 zone=0 use=2',
    'ipv4     2 tcp      6 431999 ESTABLISHED src=10.231.0.2 dst=203.0.113.2 sport=40001 dport=443 src=10.231.0.1 dst=10.231.0.2 sport=15380 dport=40001 [ASSURED] mark=0 zone=0 use=2',
    'ipv4     2 tcp      6 431999 ESTABLISHED src=10.231.0.2 dst=198.51.100.2 sport=40002 dport=80 src=198.51.100.2 dst=10.231.0.2 sport=80 dport=40002 [ASSURED] mark=0 zone=0 use=2',
  ].join('\n');
  const proxy = { host: '10.231.0.1', port: 15380 };
  assert.deepEqual(originalFrom(table, { host: '10.231.0.2', port: 40001 }, proxy), {
    host: '203.0.113.2',
    port: 443,
  });
  // Not redirected (its reply comes from the server itself), or not in the table.
  assert.equal(originalFrom(table, { host: '10.231.0.2', port: 40002 }, proxy), undefined);
  assert.equal(originalFrom(table, { host: '10.231.0.2', port: 40003 }, proxy), undefined);
});

async function echoServer(): Promise<{ server: Server; port: number }> {
  const server = createServer((c) => c.pipe(c));
  return { server, port: await listening(server) };
}

/** Send `data` through the proxy; what came back, or the error that ended it. */
async function through(proxyPort: number, data: string, anyAnswer = false): Promise<string> {
  const c = connect(proxyPort, '127.0.0.1');
  let out = '';
  c.on('data', (b: Buffer) => {
    out += b.toString('latin1');
    if (anyAnswer || out.length >= data.length) c.end();
  });
  c.write(Buffer.from(data, 'latin1'));
  return new Promise((resolve, reject) => {
    c.on('error', (e) => reject(e));
    c.on('close', () => resolve(out));
  });
}

/** A listener on loopback whose connections the proxy serves as if steered to `to`. */
async function steering(proxy: NameProxy, to: Endpoint): Promise<Server> {
  const server = createServer((c) => proxy.serve(c, to));
  await listening(server);
  return server;
}

test('the proxy splices an allowed name to its destination and resets a refused one', async () => {
  const echo = await echoServer();
  const decided: string[] = [];
  const proxy = new NameProxy(async (p, to) => {
    decided.push(`${p.proto} ${p.name} ${to.port === echo.port}`);
    return p.name === 'a.test' ? to : undefined;
  });
  const server = await steering(proxy, { host: '127.0.0.1', port: echo.port });
  const port = (server.address() as AddressInfo).port;
  try {
    const ok = 'GET / HTTP/1.1\r\nHost: a.test\r\n\r\nbody';
    assert.equal(await through(port, ok), ok);
    await assert.rejects(through(port, 'GET / HTTP/1.1\r\nHost: b.test\r\n\r\n'), /ECONNRESET/);
    assert.deepEqual(decided, ['http a.test true', 'http b.test true']);
  } finally {
    proxy.close();
    server.close();
    echo.server.close();
  }
});

test("the DNS proxy's TCP port hands steered connections to the name proxy, answers the rest", async () => {
  const echo = await echoServer();
  const proxy = new NameProxy(async (_p, to) => to);
  let steered = true;
  const dns = await DnsListener.listen(
    { host: '127.0.0.1', port: 0 },
    async (q) => refusedReply(q),
    {
      max: 4,
      take: async (c) => {
        if (steered) proxy.serve(c, { host: '127.0.0.1', port: echo.port });
        return steered;
      },
    },
  );
  try {
    const req = 'GET / HTTP/1.1\r\nHost: a.test\r\n\r\n';
    assert.equal(await through(dns.port, req), req);
    steered = false; // conntrack says port 53: a DNS client
    const query = Buffer.from('00010100000100000000000001610474657374000001000' + '1', 'hex');
    const answer = await through(dns.port, frame(query).toString('latin1'), true);
    // After the 2-byte length: the reply's RCODE (low nibble of byte 3) is REFUSED.
    assert.equal((Buffer.from(answer, 'latin1')[5] as number) & 0x0f, 5, 'REFUSED over TCP');
  } finally {
    dns.close();
    proxy.close();
    echo.server.close();
  }
});
