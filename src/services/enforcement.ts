/**
 * Nothing silently unenforced: what a sandbox asks of the host (a network policy, resource
 * limits, a confined QEMU, names inspected by the name proxy) against what this host can
 * enforce. A sandbox whose asks the host cannot hold is refused, naming what is missing
 * and the daemon flag that accepts the weaker mode (`--accept-unenforced`); started with
 * it, the sandbox reports what is not enforced (`unenforced` in its REST shape, `forkd ps`
 * and `forkd info`).
 */
import { existsSync } from 'node:fs';
import { ForkdError } from '../errors.js';

/** What a sandbox may have unenforced. */
export type Unenforced = 'network' | 'names' | 'limits' | 'confinement';

/** What this host enforces, gathered from the services that know. */
export interface HostEnforcement {
  /**
   * The network service's mode: `netns` enforces policies, `user` does not; `off` (no
   * network service: tests, `forkd run`) gives `nat` sandboxes slirp's `restrict=on`,
   * which lets nothing out.
   */
  network: 'netns' | 'user' | 'off';
  /** Why limits are not enforced here, or null when a cgroup layout holds them. */
  limits: string | null;
  /** Whether QEMU runs as a uid of its own (root, confinement on). */
  confineUser: boolean;
  /** Whether confinement was turned off on purpose (`--no-confine`: not refused again). */
  confineOff: boolean;
}

/** What one sandbox asks. */
export interface EnforcementAsk {
  network: 'nat' | 'none';
  /** Its policy names hostnames (judged through the name proxy, which needs conntrack). */
  namesHosts: boolean;
}

/** The name proxy reads where a steered connection was going from conntrack's procfs. */
export function conntrackReadable(): boolean {
  return existsSync('/proc/net/nf_conntrack');
}

/** What `ask` would run without on `host`, each with why. */
export function unenforcedOf(
  ask: EnforcementAsk,
  host: HostEnforcement,
  conntrack = conntrackReadable,
): { what: Unenforced; why: string }[] {
  const out: { what: Unenforced; why: string }[] = [];
  if (ask.network === 'nat' && host.network === 'user') {
    out.push({
      what: 'network',
      why: 'no network namespace and nftables (the daemon is not root, or nft is missing): the guest would reach the host and its loopback whatever its policy',
    });
  } else if (ask.network === 'nat' && host.network === 'netns' && ask.namesHosts && !conntrack()) {
    out.push({
      what: 'names',
      why: 'no /proc/net/nf_conntrack (CONFIG_NF_CONNTRACK_PROCFS): hostname rules cannot be checked by the name proxy',
    });
  }
  if (host.limits !== null) {
    out.push({ what: 'limits', why: `no cgroup limits (${host.limits})` });
  }
  if (!host.confineUser && !host.confineOff) {
    out.push({
      what: 'confinement',
      why: "QEMU cannot run as a uid of its own (the daemon is not root): it would run as the daemon's user",
    });
  }
  return out;
}

/**
 * Refuse a sandbox the host cannot hold to what it asks, unless the daemon accepts the
 * weaker mode; returns what it will run without (for its report).
 */
export function checkEnforcement(
  ask: EnforcementAsk,
  host: HostEnforcement,
  accept: boolean,
): Unenforced[] {
  const missing = unenforcedOf(ask, host);
  if (missing.length === 0 || accept) return missing.map((m) => m.what);
  throw new ForkdError(
    'unsupported',
    `this host cannot enforce what the sandbox asks: ${missing.map((m) => `${m.what}: ${m.why}`).join('; ')}. ` +
      'Run the daemon as root on a host with nftables and cgroups (`forkd doctor`), ' +
      'or accept running without it: `forkd daemon --accept-unenforced` (FORKD_ACCEPT_UNENFORCED=1)' +
      (missing.some((m) => m.what === 'network') ? ', or create it with --network none' : ''),
    { unenforced: missing.map((m) => m.what) },
  );
}
