/**
 * What a SIGKILLed daemon leaves of forkd's networking on the host (its pool's namespaces,
 * the `inet forkd` table, IPv4 forwarding turned on) is undone by the next daemon's start
 * and close, and forwarding ends as the host had it; a daemon that stops leaves the table
 * to another that still runs. No VM: a process that starts the network service
 * (helpers/net-holder.ts) stands in for the daemon. Two network services in one process
 * (two in-process daemons) keep each other's namespaces.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { FORWARDING_FILE, NETNS_DIR } from '../../../src/drivers/net/netns.js';
import { hostTableExists } from '../../../src/drivers/net/nft.js';
import { NetworkManager } from '../../../src/services/network/service.js';
import { run } from '../../../src/util/exec.js';
import { assertNoNetworkLeft } from '../../helpers/netcheck.js';

const forwarding = async () => (await run('sysctl', ['-n', 'net.ipv4.ip_forward'])).stdout.trim();
const script = fileURLToPath(new URL('../../helpers/net-holder.js', import.meta.url));

/** A stand-in daemon (its pool size given), once it has started: it and what it printed. */
async function standIn(t: TestContext, poolSize: 0 | 1) {
  const holder = spawn(process.execPath, [script, String(poolSize)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => holder.exitCode === null && holder.kill('SIGKILL'));
  const [line] = (await once(holder.stdout, 'data')) as [Buffer];
  return { holder, printed: line.toString().trim() };
}

test('the next start undoes what a SIGKILLed daemon left: namespaces, table, forwarding', async (t) => {
  const before = existsSync(FORWARDING_FILE) ? undefined : await forwarding();
  const { holder, printed: left } = await standIn(t, 1);
  assert.match(left, /^fkd-\d+$/, 'the stand-in daemon made no namespace');
  holder.kill('SIGKILL');
  await once(holder, 'exit');
  assert.ok(existsSync(`${NETNS_DIR}/${left}`), 'SIGKILL left its namespace (the case under test)');
  assert.ok(await hostTableExists());
  assert.equal(await forwarding(), '1');

  const next = new NetworkManager({ poolSize: 0 });
  try {
    await next.start();
    assert.equal(existsSync(`${NETNS_DIR}/${left}`), false, 'the dead daemon’s namespace stayed');
  } finally {
    await next.close();
  }
  await assertNoNetworkLeft([holder.pid ?? -1]);
  // Forwarding is what the host had before forkd (unless another daemon still needs it on).
  if (before !== undefined && !(await hostTableExists())) assert.equal(await forwarding(), before);
  assert.equal(existsSync(FORWARDING_FILE) && !(await hostTableExists()), false);
});

test('a daemon that stops leaves the table to another that runs but has no namespace yet', async (t) => {
  const { holder, printed } = await standIn(t, 0);
  assert.equal(printed, 'none');
  const other = new NetworkManager({ poolSize: 1 });
  await other.start();
  await other.close();
  assert.ok(await hostTableExists(), 'a stopping daemon removed the table a running one uses');
  assert.equal(await forwarding(), '1', 'a stopping daemon turned forwarding off under another');

  holder.kill('SIGKILL');
  await once(holder, 'exit');
  const next = new NetworkManager({ poolSize: 0 });
  await next.start();
  await next.close();
  await assertNoNetworkLeft([holder.pid ?? -1]);
});

test('two daemons in one process (a test’s two nodes): the second’s start keeps the first’s pool', async () => {
  const first = new NetworkManager({ poolSize: 1 });
  const second = new NetworkManager({ poolSize: 1 });
  try {
    await first.start();
    await first.lease('sbx-first', 'nat'); // waits for a namespace; the pool refills behind it
    await second.start(); // its sweep used to delete `first`'s pool (same pid)
    // Both lease: each its own namespace and DNS proxy (before: EADDRINUSE 10.231.0.x:53).
    await first.lease('sbx-first-2', 'nat');
    await second.lease('sbx-second', 'nat');
    const owners = await Promise.all(
      ['sbx-first', 'sbx-first-2', 'sbx-second'].map(async (id) => {
        const s = id.startsWith('sbx-first') ? first : second;
        return (await s.state(id)).isolation;
      }),
    );
    assert.deepEqual(owners, ['netns', 'netns', 'netns']);
  } finally {
    await second.close();
    await first.close();
  }
  await assertNoNetworkLeft();
});
