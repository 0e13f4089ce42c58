/**
 * A stand-in for a daemon that is SIGKILLed (network/leftovers.test.ts): it starts the
 * network service (host table, IPv4 forwarding, a pool of one namespace, or none with the
 * argument `0`), prints the namespace's name once it exists (`none` without one), and
 * waits to be killed without cleaning anything up.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { listNetns, netnsOf, NETNS_OWNERS } from '../../src/drivers/net/netns.js';
import { NetworkManager } from '../../src/services/network/service.js';

async function mine(): Promise<string | undefined> {
  for (const index of await listNetns()) {
    const { name } = netnsOf(index);
    const owner = await readFile(join(NETNS_OWNERS, name), 'utf8').catch(() => '');
    if (Number(owner.trim()) === process.pid) return name;
  }
  return undefined;
}

const poolSize = process.argv[2] === '0' ? 0 : 1;
await new NetworkManager({ poolSize }).start();
const deadline = Date.now() + (poolSize ? 20_000 : 0);
let name = await mine();
while (!name && Date.now() < deadline) {
  await sleep(100);
  name = await mine();
}
process.stdout.write(`${name ?? 'none'}\n`);
setInterval(() => undefined, 60_000);
