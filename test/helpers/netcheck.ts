/**
 * What the network tests assert after themselves: no forkd namespace, veth or host table is
 * left by this test. Other sessions may run a daemon on the same host at once; a namespace
 * that a live process other than this one made is theirs, and while one exists, or another
 * live daemon is registered as a user of the host table, the table is theirs too.
 */
import assert from 'node:assert/strict';
import { listNetns, netnsOf, ownedByOther, VETH_PREFIX } from '../../src/drivers/net/netns.js';
import { hostTableExists } from '../../src/drivers/net/nft.js';
import { otherUsers } from '../../src/drivers/net/host-lock.js';
import { run } from '../../src/util/exec.js';

export async function assertNoNetworkLeft(): Promise<void> {
  const ours: string[] = [];
  let others = 0;
  for (const index of await listNetns()) {
    const ns = netnsOf(index);
    if (await ownedByOther(ns)) others++;
    else ours.push(ns.name);
  }
  assert.deepEqual(ours, [], 'a network namespace was left behind');
  // Another live daemon's table and veths are its own, even before its first namespace.
  if (others > 0 || (await otherUsers()).length > 0) return;
  const links = (await run('ip', ['-o', 'link'])).stdout;
  assert.doesNotMatch(links, new RegExp(`${VETH_PREFIX}\\d`), 'a veth was left behind');
  assert.equal(await hostTableExists(), false, 'the nftables table inet forkd was left behind');
}
