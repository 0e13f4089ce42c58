/**
 * `forkd daemon --dns-upstream ADDR:PORT`: the guests' DNS goes to the resolver given, here
 * a DNS server this test runs on loopback that alone knows `web.test` (an address of the
 * test's own outside world, helpers/world.ts). A `nat` sandbox allowed only `web.test`
 * resolves it and GETs from it; another name the server knows is refused by the policy
 * before it is asked. A bad address stops the daemon before it starts, saying what it takes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { forkd as runCli } from '../../helpers/cli.js';
import { daemonForFile } from '../../helpers/daemon-process.js';
import { serveDns, type DnsServer } from '../../helpers/dns-server.js';
import { assertNoNetworkLeft } from '../../helpers/netcheck.js';
import { startWorld, WORLD, type World } from '../../helpers/world.js';

const LOOPBACK = { host: '127.0.0.1', port: 0 };

let world: World | undefined;
let dns: DnsServer | undefined;

const file = daemonForFile({
  prepare: async () => {
    world = await startWorld();
    dns = await serveDns({ 'web.test': WORLD.a, 'other.test': WORLD.b }, LOOPBACK);
    return ['--dns-upstream', `127.0.0.1:${dns.port}`];
  },
  cleanup: async () => {
    try {
      await assertNoNetworkLeft([file.daemon.pid]);
    } finally {
      await world?.close();
      await dns?.close();
    }
  },
});

const forkd = (...args: string[]) => runCli(args, { env: file.home.env });

/** Run a script in the guest: exit code and output. */
async function sh(id: string, script: string): Promise<{ code: number | null; out: string }> {
  const r = await forkd('exec', id, '--', 'sh', '-c', script);
  return { code: r.code, out: r.stdout.toString() + r.stderr };
}

test('the guest resolves a name only the --dns-upstream server knows, and a hostname policy matches it', async () => {
  const made = await forkd(
    ...['create', '--network', 'nat', '--allow-out', 'web.test', '--no-internet', '--json'],
  );
  assert.equal(made.code, 0, made.stderr);
  const { id } = JSON.parse(made.stdout.toString()) as { id: string };
  // The A query only, waited for long enough: its answer waits for the address to be put in
  // the namespace's sets (an `nft` run), seconds on a loaded host, past nslookup's default.
  const looked = await sh(id, 'nslookup -type=a -timeout=10 web.test');
  assert.match(looked.out, /198\.51\.100\.2/, `${looked.out} asked: ${dns?.asked.join(', ')}`);
  assert.ok(dns?.asked.includes('web.test'), `the upstream was asked ${dns?.asked.join(', ')}`);
  const got = await sh(id, 'timeout 8 wget -q -O- http://web.test/hello');
  assert.deepEqual(got, { code: 0, out: 'hello from web.test\n' });
  // Not allowed: refused by the proxy, never forwarded.
  const other = await sh(id, 'nslookup -type=a other.test');
  assert.notEqual(other.code, 0, other.out);
  assert.ok(!dns?.asked.includes('other.test'), 'a refused name went upstream');
  assert.equal((await forkd('kill', id)).code, 0);
});

test('a --dns-upstream that is no address is refused before the daemon starts', async () => {
  const r = await forkd('daemon', '--dns-upstream', 'resolver.example');
  assert.equal(r.code, 2, r.stderr);
  assert.match(
    r.stderr,
    /--dns-upstream "resolver\.example" is not a resolver address: give an IP address and optionally a port/,
  );
  const env = await runCli(['daemon'], {
    env: { ...file.home.env, FORKD_DNS_UPSTREAM: '127.0.0.1:99999' },
  });
  assert.equal(env.code, 2, env.stderr);
  assert.match(env.stderr, /FORKD_DNS_UPSTREAM "127\.0\.0\.1:99999" is not a resolver address/);
});
