/**
 * The network service: which mode this host gets (a namespace per sandbox as root, plain
 * user networking otherwise), a small pool of namespaces made ahead so a fork
 * does not wait for one, each sandbox's policy (enforced in its namespace, changed at run
 * time), its DNS proxy and name proxy (TLS SNI / HTTP Host), its denial count, and its
 * published ports. A published port's connection wakes a paused sandbox first (the sandbox
 * service's waker); a hibernated one keeps its host listeners while its namespace goes, and
 * gets them back on its wake.
 */
import {
  DnsListener,
  forwardQuery,
  refusedReply,
  answerAddresses,
  systemResolver,
  type DnsEndpoint,
  type DnsQuestion,
} from '../../drivers/net/dns.js';
import {
  conntrackOriginal,
  NAME_PROXY_MAX,
  NameProxy,
  type Endpoint,
  type Peeked,
} from '../../drivers/net/names.js';
import {
  createNetns,
  deleteNetns,
  endOwner,
  netnsOfPid,
  newOwner,
  netnsPids,
  readNetnsState,
  recordOwner,
  sweepNetns,
  writeNetnsState,
  type Netns,
} from '../../drivers/net/netns.js';
import { addUser, removeUser, withHostLock } from '../../drivers/net/host-lock.js';
import {
  addDnsElements,
  applyPolicy,
  deniedCount,
  DNS_PORT,
  DNS_SETS,
  installHostTable,
  removeHostTable,
} from '../../drivers/net/nft.js';
import { ForkdError } from '../../errors.js';
import { silentLog, type ServiceLog } from '../log.js';
import {
  decideName,
  judgeConnection,
  egressRules,
  mergeEgress,
  NO_EGRESS,
  OPEN_EGRESS,
  type Egress,
  type EgressInput,
  type NameRefusal,
} from './policy.js';
import { PortForwards, type PublishedPort } from './ports.js';
import { ResolvedNames } from './resolved.js';
import { detectIsolation, hostAddresses, hostTableUnused } from './host.js';
import {
  closeProxies,
  countRefusal,
  sameEgress,
  savedOf,
  type Attached,
  type NetworkIsolation,
  type NetworkMode,
  type NetworkState,
  type Refusal,
  type SavedNetwork,
} from './attached.js';

export type { NetworkIsolation, NetworkMode, NetworkState, Refusal } from './attached.js';
import type { VmHandle, VmNet } from '../../drivers/vmm.js';

export interface NetworkServiceOptions {
  log?: ServiceLog;
  /** Namespaces kept ready (default 2). */
  poolSize?: number;
  /** Where the DNS proxy forwards (default: the host's first nameserver). */
  upstream?: DnsEndpoint;
  /** Called once per DNS or name refusal and per sandbox end with denials (the audit log). */
  onDenied?: (sandbox: string, what: string) => void;
}

/**
 * Wakes a sandbox for a published port's connection: its QEMU, awake, and a release the
 * connection calls when it closes (it counts as use until then).
 */
export type Waker = (id: string) => Promise<{ vm: VmHandle; release: () => void }>;

/** The least TTL an address learned from DNS keeps its place in a set. */
const MIN_DNS_TTL_S = 60;

export class NetworkManager {
  private readonly log: ServiceLog;
  private readonly sandboxes = new Map<string, Attached>();
  private readonly pool: Netns[] = [];
  private filling: Promise<void> | undefined;
  private isolation: NetworkIsolation | undefined;
  private closed = false;
  private waker: Waker | undefined;
  private readonly resolved: ResolvedNames;
  /** Who this service's namespaces belong to (the pid alone is shared by in-process daemons). */
  private readonly owner = newOwner();

  constructor(private readonly opts: NetworkServiceOptions = {}) {
    this.log = opts.log ?? silentLog;
    this.resolved = new ResolvedNames(() => this.upstream());
  }

  /** netns as root with nftables, else user networking (what doctor reports). */
  static detect(): Promise<{ isolation: NetworkIsolation; reason: string }> {
    return detectIsolation();
  }

  /**
   * Delete the namespaces no process runs in (an earlier daemon's pool, or sandboxes that
   * ended while no daemon ran; not the pool of another daemon that is running), install the
   * host table and fill the pool. A namespace an adopted sandbox's QEMU still runs in is
   * kept. When none is left, what a SIGKILLed daemon left of the host's side (its table,
   * IPv4 forwarding turned on) is undone first, so the setting put back at the end is the
   * host's own.
   */
  async start(): Promise<void> {
    this.isolation = (await NetworkManager.detect()).isolation;
    if (this.isolation !== 'netns') return;
    await withHostLock(async () => {
      await sweepNetns({ self: this.owner });
      if (await hostTableUnused()) await removeHostTable();
      await addUser();
      await installHostTable();
    });
    this.refill();
  }

  /**
   * How a published port's connection gets a sandbox's QEMU, awake: the sandbox service
   * wakes a paused sandbox (and counts the connection as a request). Without one the VM
   * the port was published on is used.
   */
  setWaker(wake: Waker): void {
    this.waker = wake;
  }

  get mode(): NetworkIsolation {
    return this.isolation ?? 'user';
  }

  /**
   * The NIC of a sandbox about to start (undefined for `none`): as root a namespace of its
   * own with `egress` in force (nothing out unless given), until {@link enforce} changes it.
   */
  async lease(
    id: string,
    mode: NetworkMode,
    egress: Egress = NO_EGRESS,
  ): Promise<VmNet | undefined> {
    // A hibernated sandbox waking up keeps the host listeners it held while paused.
    const ports = this.sandboxes.get(id)?.ports ?? new PortForwards();
    if (mode === 'none') {
      this.sandboxes.set(id, { mode, egress: NO_EGRESS, proxyDenied: 0, ports });
      return undefined;
    }
    if (this.mode !== 'netns') {
      this.sandboxes.set(id, { mode, egress: OPEN_EGRESS, proxyDenied: 0, ports });
      return {};
    }
    const ns = this.pool.shift() ?? (await createNetns(this.taken(), this.owner));
    this.refill();
    const a: Attached = { mode, egress, ns, proxyDenied: 0, ports };
    this.sandboxes.set(id, a);
    try {
      await applyPolicy(ns, egressRules(egress, hostAddresses()));
      await this.listenProxies(id, a, ns);
      await this.save(id);
    } catch (e) {
      await this.release(id);
      throw e;
    }
    return { netns: ns.path };
  }

  /**
   * The NIC of a sandbox whose QEMU runs in a namespace of the caller's (a Kubernetes pod's,
   * made by CNI): its traffic leaves from that namespace's addresses under the caller's
   * rules (NetworkPolicy), so forkd installs no policy and no DNS proxy there, and never
   * deletes the namespace.
   */
  async leaseIn(id: string, netns: string): Promise<VmNet> {
    const ports = this.sandboxes.get(id)?.ports ?? new PortForwards();
    this.sandboxes.set(id, { mode: 'nat', egress: OPEN_EGRESS, proxyDenied: 0, ports });
    return { netns };
  }

  /** Install (or replace) a sandbox's policy: an override merged over what it inherits. */
  async enforce(id: string, inherited: Egress, override?: EgressInput): Promise<Egress> {
    const a = this.attached(id);
    const egress = mergeEgress(inherited, override);
    // A pool member leased with its snapshot's policy needs no second nft run on the fork path.
    if (a.ns && !sameEgress(a.egress, egress)) {
      await applyPolicy(a.ns, egressRules(egress, hostAddresses()));
    }
    a.egress = egress;
    await this.save(id);
    return egress;
  }

  /**
   * After a daemon restart: take over a re-adopted sandbox's network. Its QEMU still runs
   * in its namespace under its rules; what died with the old daemon (the DNS proxy, the
   * published ports' listeners) comes back from the state kept next to the namespace, on
   * the same host ports. A port whose host port was taken meanwhile is dropped (logged).
   */
  async adopt(id: string, vm: VmHandle): Promise<void> {
    const ports = new PortForwards();
    if (!vm.spec.net) {
      this.sandboxes.set(id, { mode: 'none', egress: NO_EGRESS, proxyDenied: 0, ports });
      return;
    }
    const ns = this.mode === 'netns' ? await netnsOfPid(vm.pid) : undefined;
    if (!ns) {
      if (this.mode === 'netns')
        this.log.warn({ sandbox: id }, 'a re-adopted sandbox runs in no namespace of forkd');
      this.sandboxes.set(id, { mode: 'nat', egress: OPEN_EGRESS, proxyDenied: 0, ports });
      return;
    }
    const saved = savedOf(await readNetnsState(ns), id);
    if (!saved)
      this.log.warn(
        { sandbox: id },
        'no saved network state: its rules stay, its policy shows as open',
      );
    await recordOwner(ns, this.owner);
    const a: Attached = {
      mode: 'nat',
      egress: saved?.egress ?? OPEN_EGRESS,
      ns,
      proxyDenied: 0,
      ports,
    };
    this.sandboxes.set(id, a);
    await this.listenProxies(id, a, ns);
    for (const p of saved?.ports ?? []) {
      await this.publish(id, vm, p.port, { hostPort: p.host_port, bind: p.host }).catch(
        (e: unknown) =>
          this.log.warn({ sandbox: id, port: p.port, err: e }, 'could not publish a port again'),
      );
    }
    await this.save(id);
  }

  /** `PATCH`: change a running sandbox's policy; new connections follow it at once. */
  async patch(id: string, override: EgressInput): Promise<NetworkState> {
    const a = this.attached(id);
    if (a.mode === 'none') {
      throw new ForkdError(
        'bad_request',
        `sandbox ${id} has no network (network none); its policy cannot change`,
        { id },
      );
    }
    if (!a.ns && override !== 'none') {
      throw new ForkdError(
        'bad_request',
        'this host runs without network namespaces (not root): egress policy is not enforced; run the daemon as root',
        { id },
      );
    }
    await this.enforce(id, a.egress, override);
    return this.state(id);
  }

  /** The egress a child inherits (the parent's, or open for a sandbox made before policies). */
  egressOf(id: string): Egress | undefined {
    return this.sandboxes.get(id)?.egress;
  }

  modeOf(id: string): NetworkMode | undefined {
    return this.sandboxes.get(id)?.mode;
  }

  async state(id: string): Promise<NetworkState> {
    const a = this.attached(id);
    const denied = a.proxyDenied + (a.ns ? await deniedCount(a.ns) : 0);
    const st: NetworkState = { mode: a.mode, egress: a.egress, denied, ports: a.ports.list() };
    if (a.mode === 'nat') {
      st.isolation = a.ns ? 'netns' : 'user';
      st.address = '10.0.2.15';
    }
    return st;
  }

  /** Denials per sandbox, for /metrics. */
  async deniedCounts(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const id of this.sandboxes.keys()) out[id] = (await this.state(id)).denied;
    return out;
  }

  /**
   * Refusals per sandbox by reason, for /metrics: the proxies' own, UDP on an inspected
   * port (`quic`) and the rest of what the filter refused (`filter`).
   */
  async refusedCounts(): Promise<Record<string, Record<string, number>>> {
    const out: Record<string, Record<string, number>> = {};
    for (const [id, a] of this.sandboxes) {
      const counts: Partial<Record<Refusal, number>> = { ...a.refusals };
      if (a.ns) {
        const [all, unread] = await Promise.all([deniedCount(a.ns), deniedCount(a.ns, 'unread')]);
        if (unread > 0) counts.quic = unread;
        if (all - unread > 0) counts.filter = all - unread;
      }
      out[id] = counts;
    }
    return out;
  }

  /** Where the daemon reaches a guest port (for published ports and the HTTP route). */
  async reach(
    id: string,
    vm: VmHandle,
    guestPort: number,
  ): Promise<{ host: string; port: number }> {
    const a = this.attached(id);
    if (a.mode === 'none') {
      throw new ForkdError(
        'bad_request',
        `sandbox ${id} has no network (network none): no port can be reached`,
        { id },
      );
    }
    return a.ports.inner(vm, a.ns?.nsIp ?? '127.0.0.1', guestPort);
  }

  /** Publish a guest port on the host (loopback unless `bind` says otherwise). */
  async publish(
    id: string,
    vm: VmHandle,
    guestPort: number,
    opts: { hostPort?: number; bind?: string } = {},
  ): Promise<PublishedPort> {
    await this.reach(id, vm, guestPort); // a sandbox with no network is refused here
    const info = await this.attached(id).ports.publish(
      guestPort,
      this.targetOf(id, guestPort, vm),
      opts,
    );
    await this.save(id);
    return info;
  }

  /** A published port's connection target: its sandbox woken first, when there is a waker. */
  private targetOf(id: string, guestPort: number, vm?: VmHandle) {
    return async () => {
      if (!this.waker) {
        if (!vm) throw new Error(`sandbox ${id} has no QEMU to connect to`);
        return this.reach(id, vm, guestPort);
      }
      const awake = await this.waker(id);
      try {
        return { ...(await this.reach(id, awake.vm, guestPort)), release: awake.release };
      } catch (e) {
        awake.release();
        throw e;
      }
    };
  }

  /**
   * A sandbox hibernates: its namespace and DNS proxy go with its QEMU, its published
   * ports' host listeners stay (a connection wakes it); its next lease takes them back.
   */
  async hibernate(id: string): Promise<void> {
    const a = this.sandboxes.get(id);
    if (!a) return;
    a.ports.hibernate();
    await this.dropNamespace(id, a);
    this.sandboxes.set(id, { mode: a.mode, egress: a.egress, proxyDenied: 0, ports: a.ports });
  }

  /** Its DNS proxy stops and its namespace goes; its denials are reported first. */
  private async dropNamespace(id: string, a: Attached): Promise<void> {
    const denied = a.proxyDenied + (a.ns ? await deniedCount(a.ns) : 0);
    if (denied > 0) this.opts.onDenied?.(id, `${denied} connection(s) or DNS queries refused`);
    closeProxies(a);
    if (a.ns) await deleteNetns(a.ns);
  }

  /**
   * After a daemon restart, a hibernated sandbox's published ports listen again on their
   * host ports (a connection wakes it); a port taken meanwhile is dropped (logged).
   */
  async holdHibernated(id: string, mode: NetworkMode, egress: Egress, ports: PublishedPort[]) {
    const a: Attached = { mode, egress, proxyDenied: 0, ports: new PortForwards() };
    this.sandboxes.set(id, a);
    for (const p of ports) {
      await a.ports
        .publish(p.port, this.targetOf(id, p.port), { hostPort: p.host_port, bind: p.host })
        .catch((e: unknown) =>
          this.log.warn({ sandbox: id, port: p.port, err: e }, 'could not publish a port again'),
        );
    }
  }

  async unpublish(id: string, guestPort: number): Promise<void> {
    await this.attached(id).ports.unpublish(guestPort);
    await this.save(id);
  }

  /** A sandbox ended: its ports close, its proxy stops, its namespace goes. */
  async release(id: string): Promise<void> {
    const a = this.sandboxes.get(id);
    if (!a) return;
    this.sandboxes.delete(id);
    await a.ports.close();
    await this.dropNamespace(id, a);
  }

  /** Tests and shutdown: every namespace goes, and the host table when none is left. */
  async close(): Promise<void> {
    this.closed = true;
    await this.filling;
    for (const id of [...this.sandboxes.keys()]) await this.release(id);
    for (const ns of this.pool.splice(0)) await deleteNetns(ns);
    endOwner(this.owner);
    await this.dropHostTableIfUnused();
  }

  /**
   * Shutdown that leaves sandboxes running: their proxies and listeners close (the next
   * daemon opens them again), slirp's forwards and the namespaces stay; the pool's go.
   */
  async detach(): Promise<void> {
    this.closed = true;
    await this.filling;
    for (const a of this.sandboxes.values()) {
      closeProxies(a);
      await a.ports.detach();
    }
    this.sandboxes.clear();
    for (const ns of this.pool.splice(0)) await deleteNetns(ns);
    endOwner(this.owner);
    await this.dropHostTableIfUnused();
  }

  /** The host table goes with the host's last forkd namespace and its last live daemon. */
  private async dropHostTableIfUnused(): Promise<void> {
    if (this.isolation !== 'netns') return;
    await withHostLock(async () => {
      await removeUser();
      if (await hostTableUnused()) await removeHostTable();
    });
  }

  /**
   * The DNS proxy at the host end of the sandbox's veth, and the name proxy behind its TCP
   * port: a connection conntrack places elsewhere than port 53 was steered there by the
   * namespace and is the name proxy's.
   */
  private async listenProxies(id: string, a: Attached, ns: Netns): Promise<void> {
    const names = new NameProxy((peeked, to) => this.decideNamed(id, a, peeked, to));
    a.names = names;
    const at = { host: ns.hostIp, port: DNS_PORT };
    a.dns = await DnsListener.listen(at, (m, q) => this.answer(id, m, q), {
      max: NAME_PROXY_MAX,
      take: async (c) => {
        const from = { host: c.remoteAddress ?? '', port: c.remotePort ?? 0 };
        const to = await this.originalDestination(a, ns, from, at);
        if (!to || to.port === DNS_PORT) return false;
        names.serve(c, to);
        return true;
      },
    });
  }

  /** Where a steered connection was going, from the namespace's conntrack (its QEMU's view). */
  private async originalDestination(
    a: Attached,
    ns: Netns,
    from: Endpoint,
    proxy: Endpoint,
  ): Promise<Endpoint | undefined> {
    for (let tries = 0; tries < 2; tries++) {
      a.nsPid ??= (await netnsPids(ns))[0];
      if (a.nsPid === undefined) return undefined;
      const to = await conntrackOriginal(a.nsPid, from, proxy).catch(() => null);
      if (to !== null) return to;
      a.nsPid = undefined; // that process ended (a re-adopted QEMU's pid changed): look again
    }
    return undefined;
  }

  /**
   * The name proxy's verdict (the policy's, by name): where to splice the connection, or
   * undefined when refused (counted by reason and audited). A connection its name alone lets
   * through must be going to an address the daemon resolves that name to.
   */
  private async decideNamed(
    id: string,
    a: Attached,
    peeked: Peeked,
    to: Endpoint,
  ): Promise<Endpoint | undefined> {
    const judged = judgeConnection(a.egress, peeked, to.port);
    if (!judged.pass) return this.refuseNamed(id, a, peeked, to, judged.reason);
    if (judged.verify === undefined) return to;
    const ips = await this.resolved.addresses(judged.verify);
    if (ips.has(to.host)) return to;
    return this.refuseNamed(id, a, peeked, to, ips.size ? 'name_address' : 'name_unresolved');
  }

  private refuseNamed(
    id: string,
    a: Attached,
    peeked: Peeked,
    to: Endpoint,
    reason: NameRefusal,
  ): undefined {
    countRefusal(a, reason);
    const what = peeked.name ? `${peeked.proto.toUpperCase()} ${peeked.name}` : 'no name';
    this.opts.onDenied?.(id, `${what} to ${to.host}:${to.port} refused: ${reason}`);
    return undefined;
  }

  private upstream(): DnsEndpoint | undefined {
    return this.opts.upstream ?? systemResolver();
  }

  /** Keep what a restarted daemon needs next to the sandbox's namespace. */
  private async save(id: string): Promise<void> {
    const a = this.sandboxes.get(id);
    if (!a?.ns) return;
    const saved: SavedNetwork = { sandbox: id, egress: a.egress, ports: a.ports.list() };
    await writeNetnsState(a.ns, saved);
  }

  private async answer(id: string, query: Buffer, q: DnsQuestion): Promise<Buffer | undefined> {
    const a = this.sandboxes.get(id);
    if (!a) return refusedReply(query);
    const d = decideName(a.egress, q.name);
    if (d.refuse) {
      countRefusal(a, 'dns_name');
      this.opts.onDenied?.(id, `DNS ${q.name} refused`);
      return refusedReply(query);
    }
    const upstream = this.upstream();
    if (!upstream) return refusedReply(query);
    const reply = await forwardQuery(query, upstream);
    const { ips, ttlS } = answerAddresses(reply);
    if (a.ns && ips.length > 0) await this.learn(a.ns, d, ips, Math.max(ttlS, MIN_DNS_TTL_S));
    return reply;
  }

  /** Put a DNS answer's addresses in the sets of the entries that named it, before replying. */
  private async learn(ns: Netns, d: ReturnType<typeof decideName>, ips: string[], ttlS: number) {
    for (const side of ['allow', 'deny'] as const) {
      for (const port of d[side]) {
        const set = port === undefined ? DNS_SETS[side].ip : DNS_SETS[side].svc;
        const items = port === undefined ? ips : ips.map((ip) => `${ip} . ${port}`);
        await addDnsElements(ns, set, items, ttlS);
      }
    }
  }

  private attached(id: string): Attached {
    const a = this.sandboxes.get(id);
    if (a) return a;
    throw new ForkdError('sandbox_not_running', `sandbox ${id} is not running`, { id });
  }

  private taken(): Set<number> {
    const t = new Set(this.pool.map((n) => n.index));
    for (const a of this.sandboxes.values()) if (a.ns) t.add(a.ns.index);
    return t;
  }

  private refill(): void {
    if (this.filling || this.closed || this.mode !== 'netns') return;
    this.filling = (async () => {
      while (!this.closed && this.pool.length < (this.opts.poolSize ?? 2)) {
        try {
          this.pool.push(await createNetns(this.taken(), this.owner));
        } catch (e) {
          this.log.warn({ err: e }, 'could not make a network namespace');
          return;
        }
      }
    })().finally(() => (this.filling = undefined));
  }
}
