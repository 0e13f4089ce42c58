/**
 * The network service as the routes see it (NetworkService): each call leases the running
 * sandbox first (so an unknown or stopped one answers like every other sandbox route) and
 * hands its VM to the network service, which owns namespaces, policies and ports.
 */
import type { SandboxNetworkT } from '../../contract/schemas.js';
import type { NetworkService } from '../contracts.js';
import type { SandboxHost } from '../sandboxes/host.js';
import type { EgressInput } from './policy.js';
import type { NetworkManager } from './service.js';

export class SandboxNetworks implements NetworkService {
  constructor(
    private readonly network: NetworkManager,
    private readonly sandboxes: SandboxHost,
  ) {}

  async get(id: string): Promise<SandboxNetworkT> {
    await this.sandboxes.lease(id);
    return this.network.state(id);
  }

  async patch(id: string, egress: EgressInput): Promise<SandboxNetworkT> {
    await this.sandboxes.lease(id);
    return this.network.patch(id, egress);
  }

  async publish(id: string, port: number, hostPort?: number) {
    const { vm } = await this.sandboxes.lease(id);
    return this.network.publish(id, vm, port, { hostPort });
  }

  async unpublish(id: string, port: number): Promise<void> {
    await this.sandboxes.lease(id);
    await this.network.unpublish(id, port);
  }

  deniedCounts(): Promise<Record<string, number>> {
    return this.network.deniedCounts();
  }

  refusedCounts(): Promise<Record<string, Record<string, number>>> {
    return this.network.refusedCounts();
  }

  async reach(id: string, port: number) {
    const { vm } = await this.sandboxes.lease(id);
    return this.network.reach(id, vm, port);
  }
}
