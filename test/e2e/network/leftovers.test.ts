/**
 * What a SIGKILLed daemon leaves of forkd's networking on the host (its pool's namespaces,
 * the `inet forkd` table, IPv4 forwarding turned on) is undone by the next daemon's start
 * and close, and forwarding ends as the host had it. No VM: a process that starts the
 * network service (helpers/net-holder.ts) stands in for the daemon.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { FORWARDING_FILE, NETNS_DIR } from '../../../src/drivers/net/netns.js';
import { hostTableExists } from '../../../src/drivers/net/nft.js';
import { NetworkService } from '../../../src/services/network/service.js';
import { run } from '../../../src/util/exec.js';
import { assertNoNetworkLeft } from '../../helpers/netcheck.js';

const forwarding = async () => (await run('sysctl', ['-n', 'net.ipv4.ip_forward'])).stdout.trim();

test('the next start undoes what a SIGKILLed daemon left: namespaces, table, forwarding', async (t) => {
  const before = existsSync(FORWARDING_FILE) ? undefined : await forwarding();
  const script = fileURLToPath(new URL('../../helpers/net-holder.js', import.meta.url));
  const holder = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => holder.exitCode === null && holder.kill('SIGKILL'));
  const [line] = (await once(holder.stdout, 'data')) as [Buffer];
  const left = line.toString().trim();
  assert.match(left, /^fkd-\d+$/, 'the stand-in daemon made no namespace');
  holder.kill('SIGKILL');
  await once(holder, 'exit');
  assert.ok(existsSync(`${NETNS_DIR}/${left}`), 'SIGKILL left its namespace (the case under test)');
  assert.ok(await hostTableExists());
  assert.equal(await forwarding(), '1');

  const next = new NetworkService({ poolSize: 0 });
  try {
    await next.start();
    assert.equal(existsSync(`${NETNS_DIR}/${left}`), false, 'the dead daemon’s namespace stayed');
  } finally {
    await next.close();
  }
  await assertNoNetworkLeft();
  // Forwarding is what the host had before forkd (unless another daemon still needs it on).
  if (before !== undefined && !(await hostTableExists())) assert.equal(await forwarding(), before);
  assert.equal(existsSync(FORWARDING_FILE) && !(await hostTableExists()), false);
});
