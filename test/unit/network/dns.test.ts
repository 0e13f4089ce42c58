/**
 * The DNS proxy's wire format (the question of a query, the A records of an answer,
 * REFUSED, TCP framing), a listener answering over UDP and TCP on loopback, and the
 * daemon's `--dns-upstream` / FORKD_DNS_UPSTREAM as typed.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import {
  answerAddresses,
  DnsListener,
  dnsUpstreamSetting,
  frame,
  parseDnsUpstream,
  parseQuestion,
  refusedReply,
  takeFrames,
} from '../../../src/drivers/net/dns.js';

function query(name: string, id = 0x1234): Buffer {
  const labels = name
    .split('.')
    .map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)]));
  const head = Buffer.from([id >> 8, id & 255, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
  return Buffer.concat([head, ...labels, Buffer.from([0, 0, 1, 0, 1])]);
}

function answer(q: Buffer, ips: string[], ttl = 300): Buffer {
  const head = Buffer.from(q);
  head[2] = 0x81;
  head[3] = 0x80;
  head.writeUInt16BE(ips.length, 6);
  const rrs = ips.map((ip) => {
    const rr = Buffer.alloc(16);
    rr.writeUInt16BE(0xc00c, 0);
    rr.writeUInt16BE(1, 2);
    rr.writeUInt16BE(1, 4);
    rr.writeUInt32BE(ttl, 6);
    rr.writeUInt16BE(4, 10);
    ip.split('.').forEach((b, i) => (rr[12 + i] = Number(b)));
    return rr;
  });
  return Buffer.concat([head, ...rrs]);
}

test('the question of a query, lower-cased', () => {
  assert.deepEqual(parseQuestion(query('Api.Example.TEST')), {
    id: 0x1234,
    name: 'api.example.test',
    type: 1,
  });
  assert.equal(parseQuestion(Buffer.from([1, 2, 3])), undefined);
});

test('the A records of an answer (compressed names) and their lowest TTL', () => {
  const q = query('a.test');
  assert.deepEqual(answerAddresses(answer(q, ['198.51.100.2', '203.0.113.2'], 30)), {
    ips: ['198.51.100.2', '203.0.113.2'],
    ttlS: 30,
  });
  assert.deepEqual(answerAddresses(answer(q, [])), { ips: [], ttlS: 0 });
});

test('REFUSED keeps the id and the question, and has no records', () => {
  const r = refusedReply(query('bad.test', 0xbeef));
  assert.equal(r.readUInt16BE(0), 0xbeef);
  assert.equal(r[3]! & 0x0f, 5);
  assert.equal(r[2]! & 0x80, 0x80);
  assert.equal(r.readUInt16BE(6), 0);
  assert.equal(parseQuestion(r)?.name, 'bad.test');
});

test('TCP framing: messages split and joined across chunks come out whole', () => {
  const a = query('a.test', 1);
  const b = query('b.test', 2);
  const stream = Buffer.concat([frame(a), frame(b)]);
  const got: Buffer[] = [];
  const rest = takeFrames(stream.subarray(0, frame(a).length + 3), (m) => got.push(m));
  assert.equal(got.length, 1);
  takeFrames(Buffer.concat([rest, stream.subarray(frame(a).length + 3)]), (m) => got.push(m));
  assert.deepEqual(
    got.map((m) => parseQuestion(m)?.name),
    ['a.test', 'b.test'],
  );
});

test('the listener answers DNS over TCP on loopback, two queries on one connection', async (t) => {
  const dns = await DnsListener.listen({ host: '127.0.0.1', port: 0 }, async (q, { name }) =>
    name === 'a.test' ? answer(q, ['198.51.100.2']) : refusedReply(q),
  );
  t.after(() => dns.close());
  const c = connect(dns.port, '127.0.0.1');
  t.after(() => c.destroy());
  c.write(Buffer.concat([frame(query('a.test', 7)), frame(query('b.test', 8))]));
  const replies: Buffer[] = [];
  let pending: Buffer = Buffer.alloc(0);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no answer in 5 s')), 5000);
    c.on('error', reject);
    c.on('data', (chunk) => {
      pending = takeFrames(Buffer.concat([pending, chunk]), (m) => replies.push(Buffer.from(m)));
      if (replies.length === 2) resolve(clearTimeout(timer));
    });
  });
  const byId = new Map(replies.map((r) => [r.readUInt16BE(0), r]));
  assert.deepEqual(answerAddresses(byId.get(7) as Buffer).ips, ['198.51.100.2']);
  assert.equal((byId.get(8) as Buffer)[3]! & 0x0f, 5, 'REFUSED');
});

test('--dns-upstream: an address with an optional port, 53 by default; anything else named', () => {
  assert.deepEqual(parseDnsUpstream('192.0.2.53'), { host: '192.0.2.53', port: 53 });
  assert.deepEqual(parseDnsUpstream('127.0.0.1:5353'), { host: '127.0.0.1', port: 5353 });
  assert.deepEqual(parseDnsUpstream('[2001:db8::53]:5353'), { host: '2001:db8::53', port: 5353 });
  assert.deepEqual(parseDnsUpstream('::1'), { host: '::1', port: 53 });
  for (const bad of ['dns.example', '1.2.3', '127.0.0.1:0', '127.0.0.1:65536', '1.1.1.1:x', '']) {
    assert.throws(
      () => parseDnsUpstream(bad),
      (e: Error & { code?: string }) =>
        e.code === 'bad_request' &&
        e.message.startsWith(`--dns-upstream "${bad}" is not a resolver address: give an IP`),
      bad,
    );
  }
  assert.equal(dnsUpstreamSetting(undefined, {}), undefined, 'the host resolver by default');
  const env = { FORKD_DNS_UPSTREAM: '127.0.0.1:5300' };
  assert.deepEqual(dnsUpstreamSetting(undefined, env), { host: '127.0.0.1', port: 5300 });
  assert.deepEqual(
    dnsUpstreamSetting('10.0.0.1', env),
    { host: '10.0.0.1', port: 53 },
    'flag wins',
  );
  assert.throws(
    () => dnsUpstreamSetting(undefined, { FORKD_DNS_UPSTREAM: 'x' }),
    /FORKD_DNS_UPSTREAM "x"/,
  );
});
