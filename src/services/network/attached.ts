/**
 * A sandbox's attachment to the network, as the network service keeps it: its mode, egress
 * policy, namespace, DNS and name proxies, refusal counts and published ports; what the API
 * shows of it (NetworkState) and what is saved in its namespace across a daemon restart.
 */
import type { DnsListener } from '../../drivers/net/dns.js';
import type { NameProxy } from '../../drivers/net/names.js';
import type { Netns } from '../../drivers/net/netns.js';
import type { Egress, NameRefusal } from './policy.js';
import type { PortForwards, PublishedPort } from './ports.js';

export type NetworkMode = 'none' | 'nat';
/** How `nat` is done on this host. */
export type NetworkIsolation = 'netns' | 'user';

/** A sandbox's network as the API shows it. */
export interface NetworkState {
  mode: NetworkMode;
  isolation?: NetworkIsolation;
  egress: Egress;
  /** The guest's address (the same in every fork). */
  address?: string;
  /** Connections and DNS queries refused so far. */
  denied: number;
  ports: PublishedPort[];
}

export interface Attached {
  mode: NetworkMode;
  egress: Egress;
  ns?: Netns;
  dns?: DnsListener;
  names?: NameProxy;
  /** A process in the namespace (its QEMU), whose conntrack table the name proxy reads. */
  nsPid?: number;
  /** DNS queries and named connections the proxies refused (the filter counts the rest). */
  proxyDenied: number;
  /** The proxies' refusals by reason (what `/metrics` shows beside the filter's). */
  refusals?: Partial<Record<Refusal, number>>;
  ports: PortForwards;
}

/** Why a sandbox's connection or query was refused, as `/metrics` labels it. */
export type Refusal = NameRefusal | 'dns_name' | 'quic' | 'filter';

export function countRefusal(a: Attached, reason: Refusal): void {
  a.proxyDenied++;
  a.refusals = { ...a.refusals, [reason]: (a.refusals?.[reason] ?? 0) + 1 };
}

export function closeProxies(a: Attached): void {
  a.dns?.close();
  a.names?.close();
}

/** What the network service saves per namespace. */
export interface SavedNetwork {
  sandbox: string;
  egress: Egress;
  ports: PublishedPort[];
}

/** The saved state, if it is there, well formed and about this sandbox. */
export function savedOf(raw: unknown, id: string): SavedNetwork | undefined {
  const s = raw as Partial<SavedNetwork> | undefined;
  if (!s || s.sandbox !== id || typeof s.egress !== 'object' || !Array.isArray(s.ports)) {
    return undefined;
  }
  return s as SavedNetwork;
}

export function sameEgress(a: Egress, b: Egress): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
