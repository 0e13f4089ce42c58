/**
 * The host's side of sandbox networking: which isolation it offers (a namespace per sandbox
 * as root with nftables, plain user networking otherwise), its own addresses (always denied
 * to sandboxes), and whether the host-wide table is still used by anyone.
 */
import { networkInterfaces } from 'node:os';
import { otherUsers } from '../../drivers/net/host-lock.js';
import { nftAvailable } from '../../drivers/net/nft.js';
import { listNetns } from '../../drivers/net/netns.js';
import type { NetworkIsolation } from './attached.js';

/** netns as root with nftables, else user networking (what doctor reports). */
export async function detectIsolation(): Promise<{ isolation: NetworkIsolation; reason: string }> {
  if (process.getuid?.() !== 0) {
    return {
      isolation: 'user',
      reason:
        "not root: QEMU user networking in the daemon's namespace (the guest reaches what the host reaches; its gateway 10.0.2.2 is the host's loopback)",
    };
  }
  if (!(await nftAvailable())) {
    return { isolation: 'user', reason: 'nft is not installed (apt-get install nftables)' };
  }
  return {
    isolation: 'netns',
    reason: 'a network namespace per sandbox, nftables egress policy',
  };
}

/** Every IPv4 address of the host (always denied to sandboxes). */
export function hostAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flat()
    .filter((i) => i && i.family === 'IPv4')
    .map((i) => (i as { address: string }).address)
    .filter((a) => !a.startsWith('127.') && !a.startsWith('10.231.'));
}

/**
 * No forkd namespace is left on the host and no other live daemon uses the table (one that
 * has started but not made its first namespace yet counts). Call under the host lock.
 */
export async function hostTableUnused(): Promise<boolean> {
  return (await listNetns()).length === 0 && (await otherUsers()).length === 0;
}
