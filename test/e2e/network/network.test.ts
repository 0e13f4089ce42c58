/**
 * Guest networking end to end, with real VMs, real namespaces and real nftables rules: the
 * test stands up its own outside world (helpers/world.ts: HTTP and DNS in a namespace of
 * its own) and checks what a user would: DNS and HTTP from a `nat` sandbox, no NIC with
 * `none`, forks and branch children online at once with the same guest address, the host,
 * loopback, metadata and other sandboxes out of reach (refused at once, counted), allow and
 * deny lists (hostnames by DNS and, for names the guest resolves itself, by TLS SNI and
 * HTTP Host, checked against where the connection goes; a ClientHello in 1-byte records;
 * UDP 443 refused), a run-time change, published ports, and nothing left behind.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Server } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { buildApp } from '../../../src/api/app.js';
import { run } from '../../../src/util/exec.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';
import { assertNoNetworkLeft } from '../../helpers/netcheck.js';
import { startWorld, WORLD, type World } from '../../helpers/world.js';

let home: TestHome;
let s: TestServices;
let world: World;
let hostService: Server;
let hostPort = 0;
/** The image-booted `nat` sandbox most tests share. */
let nat = '';

const GET = (url: string) => `timeout 8 wget -q -O- ${url}`;

/** Run a script in the guest: exit code, output, and how long it took (host side). */
async function attempt(id: string, script: string) {
  const t = Date.now();
  const r = await s.sandboxes.exec(id, { argv: ['sh', '-c', script] });
  const out = Buffer.from(r.stdout, 'base64').toString() + Buffer.from(r.stderr, 'base64');
  return { code: r.exit_code, out, ms: Date.now() - t };
}

/** A refused connection: fails, and long before wget's own 8 s timeout would. */
async function refused(id: string, script: string) {
  const r = await attempt(id, script);
  assert.notEqual(r.code, 0, `${script} should have been refused: ${r.out}`);
  assert.ok(r.ms < 4000, `${script} hung for ${r.ms} ms instead of being refused at once`);
}

async function fork(egress?: Parameters<TestServices['snapshots']['fork']>[0]['egress'], n = 1) {
  const r = await s.snapshots.fork({ snapshot: 'online', n, egress }, caller);
  assert.deepEqual(r.failed, [], JSON.stringify(r.failed));
  return r.sandboxes.map((x) => x.id);
}

const denied = async (id: string) => (await s.network!.state(id)).denied;

/** The daemon's /metrics text, as a scraper gets it. */
async function scrape(): Promise<string> {
  const app = await buildApp(s.services, { requireAuth: false });
  try {
    return (await app.inject({ url: '/metrics' })).body;
  } finally {
    await app.close();
  }
}

before(async () => {
  home = await makeTestHome();
  world = await startWorld();
  hostService = createServer((c) => c.end('host secret\n'));
  await new Promise<void>((r) => hostService.listen(0, '0.0.0.0', r));
  hostPort = (hostService.address() as { port: number }).port;
  s = await startServices(home, { network: { upstream: WORLD.dns, poolSize: 2 } });
  await s.snapshots.create({ tag: 'online', network: 'nat' }, caller);
  nat = (await s.sandboxes.create({ network: 'nat' }, caller)).id;
});

after(async () => {
  try {
    await closeAndCheck(s, home);
    hostService?.close();
  } finally {
    await world?.close();
  }
  // Nothing of forkd's networking is left on the host.
  await assertNoNetworkLeft();
});

test('a nat sandbox resolves the test name and GETs from the test server', async () => {
  assert.match(await sh(s, nat, 'nslookup a.test'), /198\.51\.100\.2/);
  assert.equal(await sh(s, nat, GET('http://a.test/hello')), 'hello from a.test\n');
  assert.match(await sh(s, nat, 'ip -4 addr show eth0'), /10\.0\.2\.15\/24/);
  // IPv6 is off: no routable address on the NIC (only the kernel's link-local), and a v6
  // connection fails at once.
  assert.doesNotMatch(await sh(s, nat, 'ip -6 addr show dev eth0; true'), /inet6 \S+ scope global/);
  await refused(nat, GET('http://[2001:db8::2]/'));
  const info = await s.sandboxes.get(nat);
  assert.equal(info.network?.mode, 'nat');
});

test('a none sandbox has no NIC at all', async () => {
  const id = (await s.sandboxes.create({ network: 'none' }, caller)).id;
  assert.equal((await sh(s, id, 'ls /sys/class/net')).trim(), 'lo');
  await s.sandboxes.kill(id);
});

test('two forks with the same guest IP reach the server at once; a branch child too', async () => {
  const [a, b] = await fork(undefined, 2);
  const both = await Promise.all(
    [a, b].map((id) =>
      sh(s, id as string, `ip -4 addr show eth0; ${GET(`http://${WORLD.a}/hello`)}`),
    ),
  );
  for (const out of both) {
    assert.match(out, /10\.0\.2\.15/);
    assert.match(out, /hello from 198\.51\.100\.2/);
  }
  // The source keeps its network across a branch; the branch child comes up online.
  const br = await s.branch.branch(nat, { tag: 'nat-br', fork: 1 }, caller);
  const child = br.children?.sandboxes[0]?.id as string;
  assert.ok(child, JSON.stringify(br.children?.failed));
  assert.equal(await sh(s, child, GET('http://a.test/hello')), 'hello from a.test\n');
  assert.equal(await sh(s, nat, GET('http://a.test/hello')), 'hello from a.test\n');
  // A branch request's egress is its children's; the source keeps its own.
  const off = await s.branch.branch(nat, { tag: 'nat-off', fork: 1, egress: 'none' }, caller);
  const offChild = off.children?.sandboxes[0]?.id as string;
  assert.ok(offChild, JSON.stringify(off.children?.failed));
  await refused(offChild, GET(`http://${WORLD.a}/hello`));
  assert.equal((await s.network!.state(nat)).egress.none, false);
  for (const id of [a, b, child, offChild]) await s.sandboxes.kill(id as string);
  await s.snapshots.remove('nat-off', {});
  await s.snapshots.remove('nat-br', {});
});

test('the host, loopback, metadata and other sandboxes are refused at once and counted', async () => {
  const [other] = await fork();
  const before = await denied(nat);
  const hostIp = (await run('ip', ['-4', '-o', 'addr', 'show', 'eth0'])).stdout.match(
    /inet ([\d.]+)/,
  )?.[1];
  const targets = [
    `10.0.2.2:${hostPort}`, // slirp's gateway = the namespace's loopback
    `127.0.0.1:${hostPort}`,
    `169.254.169.254:80`,
    `10.231.0.1:${hostPort}`, // a namespace's host end
    `10.231.0.6:80`, // another sandbox's namespace
    ...(hostIp ? [`${hostIp}:${hostPort}`] : []),
  ];
  for (const t of targets) await refused(nat, GET(`http://${t}/`));
  assert.ok((await denied(nat)) - before >= targets.length - 2, 'denials were not counted');
  // A published port of another sandbox is on the host's loopback: not the guest's.
  const pub = await s.network!.publish(
    other as string,
    (await s.sandboxes.lease(other as string)).vm,
    8080,
  );
  await refused(nat, GET(`http://10.0.2.2:${pub.host_port}/`));
  await s.sandboxes.kill(other as string);
});

test('allow-list by CIDR and by hostname; deny-list wins; PATCH applies; egress none', async () => {
  const [byCidr, byName, denyWins, offline] = [
    ...(await fork({ allow_internet: false, allow_out: ['198.51.100.0/24'] })),
    ...(await fork({ allow_internet: false, allow_out: ['a.test'] })),
    ...(await fork({ allow_out: ['198.51.100.0/24'], deny_out: [`${WORLD.a}:80`] })),
    ...(await fork('none')),
  ] as string[];
  assert.match(await sh(s, byCidr as string, GET(`http://${WORLD.a}/hello`)), /hello/);
  await refused(byCidr as string, GET(`http://${WORLD.b}/hello`));

  assert.equal(await sh(s, byName as string, GET('http://a.test/hello')), 'hello from a.test\n');
  await refused(byName as string, GET('http://b.test/hello')); // DNS REFUSED
  await refused(byName as string, GET(`http://${WORLD.b}/hello`));

  // Names the guest resolves itself (/etc/hosts, no DNS) are judged by SNI / HTTP Host.
  await sh(s, byName as string, `echo '${WORLD.b} b.test' >> /etc/hosts`);
  const named = await denied(byName as string);
  await refused(byName as string, GET('http://b.test/hello'));
  await refused(byName as string, GET('https://b.test/hello'));
  assert.equal((await denied(byName as string)) - named, 2, 'named refusals were not counted');
  const audited = s.store.audit
    .recent(200)
    .filter((e) => e.target === byName && e.code === 'egress_denied')
    .map((e) => e.route);
  for (const what of [`HTTP b.test to ${WORLD.b}:80`, `TLS b.test to ${WORLD.b}:443`]) {
    const line = `${what} refused: name_not_allowed`;
    assert.ok(audited.includes(line), `${line} not audited: ${audited.join('; ')}`);
  }
  const metrics = await scrape();
  const gauge = `forkd_sandbox_egress_denied{sandbox="${byName}"} ${await denied(byName as string)}`;
  assert.ok(metrics.includes(gauge), `metrics lack ${gauge}`);
  const byReason = `forkd_sandbox_egress_refused{sandbox="${byName}",reason="name_not_allowed"} 2`;
  assert.ok(metrics.includes(byReason), `metrics lack ${byReason}`);
  // A denied address stays denied whatever name the connection carries.
  await sh(s, byName as string, `echo '${WORLD.b} a.test' >> /etc/hosts`);
  await s.network!.patch(byName as string, { deny_out: ['203.0.113.0/24'] });
  await refused(byName as string, GET('https://a.test/hello'));

  await refused(denyWins as string, GET(`http://${WORLD.a}/hello`));
  assert.match(await sh(s, denyWins as string, GET(`http://${WORLD.b}/hello`)), /hello/);

  await refused(offline as string, GET(`http://${WORLD.a}/hello`));
  // A REFUSED answer, not a timeout; a retry each second rides out one lost UDP packet.
  const dns = await attempt(offline as string, 'nslookup -timeout=1 -retry=3 a.test');
  assert.match(dns.out, /REFUSED/, `nslookup a.test was not refused: ${dns.out}`);
  assert.ok((await denied(offline as string)) >= 2);

  // At run time: the CIDR sandbox goes offline, then gets b back.
  await s.network!.patch(byCidr as string, 'none');
  await refused(byCidr as string, GET(`http://${WORLD.a}/hello`));
  await s.network!.patch(byCidr as string, { allow_out: [WORLD.b] });
  assert.match(await sh(s, byCidr as string, GET(`http://${WORLD.b}/hello`)), /hello/);
  for (const id of [byCidr, byName, denyWins, offline]) await s.sandboxes.kill(id as string);
});

/** `hello` (whole TLS records) re-cut so every byte of its handshake is a record of its own. */
function oneByteRecords(hello: Buffer): Buffer {
  const msg = hello.subarray(5, 5 + hello.readUInt16BE(3));
  return Buffer.concat([...msg].map((b) => Buffer.of(0x16, 0x03, 0x01, 0, 1, b)));
}

/** The ClientHello Node's TLS client sends for `servername` (caught on loopback). */
async function clientHello(servername: string): Promise<Buffer> {
  return new Promise<Buffer>((resolve) => {
    const server = createServer((c) =>
      c.once('data', (b: Buffer) => {
        resolve(b);
        c.destroy();
        server.close();
      }),
    );
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      tlsConnect({ port, host: '127.0.0.1', servername }).on('error', () => undefined);
    });
  });
}

test("a hostname rule holds against the guest's word: the name must resolve where the connection goes", async () => {
  // allowed.test is 203.0.113.2 in the world's DNS; the guest claims it is 198.51.100.2.
  const [id] = (await fork({ allow_internet: false, allow_out: ['allowed.test'] })) as [string];
  await sh(s, id as string, `echo '${WORLD.a} allowed.test' >> /etc/hosts`);
  await refused(id as string, GET('https://allowed.test/hello')); // SNI allowed.test
  await refused(id as string, GET('http://allowed.test/hello')); // Host: allowed.test

  // A ClientHello cut into 1-byte TLS records is reassembled and judged like a whole one.
  const split = oneByteRecords(await clientHello('allowed.test')).toString('base64');
  const send = (ip: string) =>
    `echo ${split} | base64 -d > /tmp/hello; (cat /tmp/hello; sleep 4) | timeout 5 nc ${ip} 443 | head -c 3 | od -An -tx1`;
  assert.equal((await sh(s, id as string, send(WORLD.a))).trim(), '', 'a lie got an answer');
  assert.equal((await sh(s, id as string, send(WORLD.b))).trim(), '16 03 03', 'no ServerHello');

  // Its real address: through the name proxy (the guest did not ask DNS), allowed.
  await sh(
    s,
    id as string,
    `sed -i '/allowed.test/d' /etc/hosts; echo '${WORLD.b} allowed.test' >> /etc/hosts`,
  );
  assert.equal(
    await sh(s, id as string, GET('http://allowed.test/hello')),
    'hello from allowed.test\n',
  );
  assert.equal(
    await sh(s, id as string, GET('https://allowed.test/hello')),
    'hello from allowed.test\n',
  );

  // UDP 443 (QUIC) is not read: refused even to the address DNS gave for the allowed name
  // (counted as `quic` below; the world answers UDP 443, so a datagram let through would).
  const udp = `nslookup allowed.test >/dev/null; timeout 4 tftp -g -r q -l - ${WORLD.b} 443`;
  const blocked = await attempt(id as string, udp);
  assert.notEqual(blocked.code, 0, blocked.out);
  assert.doesNotMatch(blocked.out, /answered/);

  const audited = s.store.audit
    .recent(200)
    .filter((e) => e.target === id && e.code === 'egress_denied')
    .map((e) => e.route);
  for (const what of [`TLS allowed.test to ${WORLD.a}:443`, `HTTP allowed.test to ${WORLD.a}:80`]) {
    const line = `${what} refused: name_address`;
    assert.ok(audited.includes(line), `${line} not audited: ${audited.join('; ')}`);
  }
  const metrics = await scrape();
  for (const [reason, n] of [
    ['name_address', 3],
    ['quic', 1],
  ] as const) {
    const m = new RegExp(
      `forkd_sandbox_egress_refused\\{sandbox="${id}",reason="${reason}"\\} (\\d+)`,
    ).exec(metrics);
    assert.ok(m && Number(m[1]) >= n, `metrics: ${reason} of ${id} not counted`);
  }
  await s.sandboxes.kill(id);
});

test('a published port answers on the host and through the daemon route, and goes with the sandbox', async () => {
  const id = (await fork())[0] as string;
  await sh(s, id, 'mkdir -p /www && echo served > /www/index.html && httpd -p 8080 -h /www');
  const pub = await s.services.network!.publish(id, 8080);
  assert.equal(pub.host, '127.0.0.1');
  const viaHost = await fetch(`http://127.0.0.1:${pub.host_port}/index.html`);
  assert.equal(await viaHost.text(), 'served\n');

  const app = await buildApp(s.services, { requireAuth: false });
  try {
    const viaDaemon = await app.inject({ url: `/v1/sandboxes/${id}/ports/8080/index.html` });
    assert.equal(viaDaemon.statusCode, 200);
    assert.equal(viaDaemon.body, 'served\n');
    const nothing = await app.inject({ url: `/v1/sandboxes/${id}/ports/9999/` });
    assert.equal(nothing.statusCode, 502, nothing.body);
  } finally {
    await app.close();
  }
  await s.sandboxes.kill(id);
  await assert.rejects(
    new Promise((resolve, reject) =>
      connect(pub.host_port, '127.0.0.1').on('connect', resolve).on('error', reject),
    ),
    /ECONNREFUSED/,
  );
});

test('after a daemon restart a sandbox still resolves under its policy and its port answers', async () => {
  const allowed = ['a.test', 'allowed.test'];
  const [id] = (await fork({ allow_internet: false, allow_out: allowed })) as [string];
  await sh(s, id, 'mkdir -p /www && echo kept > /www/index.html && httpd -p 8080 -h /www');
  const pub = await s.services.network!.publish(id, 8080);
  // The daemon goes (its sandboxes keep running) and a new one starts on the same home.
  await s.detach();
  s.store.close();
  s = await startServices(home, { network: { upstream: WORLD.dns, poolSize: 2 } });

  assert.equal(await sh(s, id, GET('http://a.test/hello')), 'hello from a.test\n');
  await refused(id, GET('http://b.test/hello'));
  // The restarted daemon's name proxy judges SNI again (a name the guest did not ask DNS).
  await sh(s, id, `echo '${WORLD.b} allowed.test' >> /etc/hosts`);
  assert.equal(await sh(s, id, GET('https://allowed.test/hello')), 'hello from allowed.test\n');
  const after = await s.network!.state(id);
  assert.deepEqual(after.egress.allow_out, allowed);
  assert.deepEqual(after.ports, [pub]);
  const viaHost = await fetch(`http://127.0.0.1:${pub.host_port}/index.html`);
  assert.equal(await viaHost.text(), 'kept\n');
  await s.sandboxes.kill(id);
});
