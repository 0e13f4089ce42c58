/**
 * A sandbox whose QEMU runs in a network namespace of the caller's (a Kubernetes pod's, made
 * by CNI) instead of one of forkd's: the guest's traffic leaves from that namespace's
 * addresses and the ports asked for are forwarded from them. Forks of a `network nat`
 * snapshot and starts from an image share it: what the request must hold, the NIC's lease,
 * and the forwards once the guest runs.
 */
import { statfs } from 'node:fs/promises';
import type { VmNet } from '../../drivers/vmm.js';
import { ForkdError } from '../../errors.js';
import { vmm } from '../vmm.js';
import type { NetworkManager } from '../network/service.js';
import { destroySandbox, type Sandbox } from './sandbox.js';

/** The fields of a create or fork that put its QEMU in a caller's namespace. */
export interface CallerNetns {
  /** The namespace's path (a bind mount under /run/netns, or /proc/PID/ns/net). */
  netns?: string;
  /** With netns: guest TCP ports forwarded from every address of the namespace. */
  forward_ports?: number[];
}

/** The filesystem type of a namespace file (nsfs), as statfs reports it. */
const NSFS_MAGIC = 0x6e736673;

/**
 * Refuse what cannot run in a caller's namespace before anything starts: ports without a
 * namespace, a sandbox without a NIC to NAT through it (`noNic` says why it has none), a
 * path that is not a namespace.
 */
export async function checkCallerNetns(
  req: CallerNetns,
  network: 'none' | 'nat',
  noNic: string,
): Promise<void> {
  const { netns } = req;
  if (!netns) {
    if (req.forward_ports?.length) {
      throw new ForkdError('bad_request', 'forward_ports goes with netns', {
        field: 'forward_ports',
      });
    }
    return;
  }
  const bad = (message: string) =>
    new ForkdError('bad_request', message, { field: 'netns', value: netns });
  if (network !== 'nat') throw bad(noNic);
  const fs = await statfs(netns).catch(() => undefined);
  if (!fs) throw bad(`no network namespace at ${netns}: give the path of one (as CNI's)`);
  if (fs.type !== NSFS_MAGIC) {
    throw bad(`${netns} is not a network namespace: give the path of one (as CNI's)`);
  }
}

/** The NIC of sandbox `id` in the caller's namespace: no policy of forkd's, never deleted. */
export function leaseCallerNetns(
  network: NetworkManager | undefined,
  id: string,
  netns: string,
): Promise<VmNet> {
  return network ? network.leaseIn(id, netns) : Promise.resolve({ netns });
}

/** Forward `ports` from every address of the caller's namespace; a failure ends the sandbox. */
export async function forwardCallerPorts(sb: Sandbox, ports: number[] = []): Promise<void> {
  try {
    for (const port of ports) await vmm().addPortForward(sb.vm, '0.0.0.0', port, port);
  } catch (e) {
    await destroySandbox(sb);
    throw e;
  }
}
