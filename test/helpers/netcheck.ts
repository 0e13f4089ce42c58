/**
 * What the network tests assert after themselves: no forkd namespace, veth or host table is
 * left by this test. Other tests and sessions may run daemons on the same host at once, and
 * a daemon another test SIGKILLed leaves its pool until the next daemon's start sweeps it:
 * only namespaces this process owns, or the processes in `mine` (stand-in daemons this test
 * started), are this test's. While any other exists, or another live daemon is registered as
 * a user of the host table, the veths and the table may be theirs.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import {
  listNetns,
  NETNS_DIR,
  netnsOf,
  ownerOf,
  sweepNetns,
  VETH_PREFIX,
} from '../../src/drivers/net/netns.js';
import { hostTableExists } from '../../src/drivers/net/nft.js';
import { otherUsers, withHostLock } from '../../src/drivers/net/host-lock.js';
import { run } from '../../src/util/exec.js';

export async function assertNoNetworkLeft(mine: number[] = []): Promise<void> {
  const ours: string[] = [];
  let others = 0;
  for (const index of await listNetns()) {
    const ns = netnsOf(index);
    const owner = await ownerOf(ns);
    if (owner === process.pid || (owner !== undefined && mine.includes(owner))) ours.push(ns.name);
    else others++;
  }
  assert.deepEqual(ours, [], 'a network namespace was left behind');
  if (others > 0 || (await otherUsers()).length > 0) return;
  const links = (await run('ip', ['-o', 'link'])).stdout;
  assert.doesNotMatch(links, new RegExp(`${VETH_PREFIX}\\d`), 'a veth was left behind');
  assert.equal(await hostTableExists(), false, 'the nftables table inet forkd was left behind');
}

/**
 * A test home's cleanup: the namespaces of daemons that are dead (a test SIGKILLed one and
 * did not start another) and that no process runs in go, as the next daemon's start would
 * take them; under the host lock, so a namespace another daemon is making is never seen.
 */
export async function sweepDeadNetns(): Promise<void> {
  if (process.getuid?.() !== 0 || !existsSync(NETNS_DIR)) return;
  await withHostLock(() => sweepNetns({ keepOwn: true }));
}
