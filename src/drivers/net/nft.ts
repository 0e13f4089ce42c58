/**
 * The packet filter, as nftables scripts: one host table (`inet forkd` in the root
 * namespace: sandboxes may reach nothing of the host but their DNS proxy's port, where the
 * name proxy's connections arrive too, nor each other, and are masqueraded out; shared by
 * every daemon on the host, whatever its version, so it keeps to lines every version has)
 * and one policy table per sandbox namespace, applied to the sockets QEMU's user
 * networking opens there. Every denial jumps to one chain that counts it
 * and refuses at once: TCP reset, else ICMP administratively prohibited.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { run } from '../../util/exec.js';
import { FORWARDING_FILE, inNetns, NETNS_SUBNET, VETH_PREFIX, type Netns } from './netns.js';

const TABLE = 'inet forkd';
/** The port every namespace's DNS proxy listens on, at the host end of its veth. */
export const DNS_PORT = 53;
/** Addresses no sandbox reaches whatever its policy says (host, loopback, link-local…). */
export const ALWAYS_DENIED = [
  '0.0.0.0/8',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '224.0.0.0/3',
  NETNS_SUBNET,
];
/** Private ranges: denied unless a policy's allow list names them. */
export const PRIVATE_RANGES = [
  '10.0.0.0/8',
  '100.64.0.0/10',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '198.18.0.0/15',
];

/** A host:port pair (or a network and a port) in a set of services. */
export interface Service {
  net: string;
  port: number;
}

/** One side (allow or deny) of a namespace's static lists. */
export interface RuleList {
  nets: string[];
  services: Service[];
}

/** What the namespace's table enforces, already decided by the network service. */
export interface EgressRules {
  /** Refuse everything (DNS included). */
  none: boolean;
  allowInternet: boolean;
  allow: RuleList;
  deny: RuleList;
  /** Every address of the host, refused like loopback. */
  hostAddresses: string[];
  /**
   * TCP ports whose connections no address rule decided go to the name proxy (SNI / Host
   * judged there) instead of the last verdict; empty: no proxy.
   */
  steerPorts: number[];
}

/** The sets DNS answers fill, by verdict; `_svc` ones pair the address with a port. */
export const DNS_SETS = {
  allow: { ip: 'allow_dns', svc: 'allow_dns_svc' },
  deny: { ip: 'deny_dns', svc: 'deny_dns_svc' },
} as const;

function elements(items: string[]): string {
  return items.length ? ` elements = { ${items.join(', ')} }` : '';
}

function sets(side: 'allow' | 'deny', list: RuleList): string[] {
  const dns = DNS_SETS[side];
  return [
    `set ${side}_net { type ipv4_addr; flags interval; auto-merge;${elements(list.nets)} }`,
    `set ${side}_svc { type ipv4_addr . inet_service; flags interval;${elements(
      list.services.map((s) => `${s.net} . ${s.port}`),
    )} }`,
    `set ${dns.ip} { type ipv4_addr; flags timeout; }`,
    `set ${dns.svc} { type ipv4_addr . inet_service; flags timeout; }`,
  ];
}

/** The matches of one side's sets, each to be followed by a verdict. */
function setMatches(side: 'allow' | 'deny'): string[] {
  const dns = DNS_SETS[side];
  return [
    `ip daddr @${side}_net`,
    `ip daddr . th dport @${side}_svc`,
    `ip daddr @${dns.ip}`,
    `ip daddr . th dport @${dns.svc}`,
  ];
}

function verdicts(side: 'allow' | 'deny'): string[] {
  const v = side === 'allow' ? 'accept' : 'jump deny';
  return setMatches(side).map((m) => `${m} ${v}`);
}

/**
 * The redirect to the name proxy, in the nat hook (before the filter): a connection to a
 * steered port whose address the filter would decide anyway (always denied, on a list,
 * private) is left to it; the rest goes to the proxy, which judges its SNI / Host. The
 * proxy is on the DNS port (the DNS proxy hands it what conntrack places elsewhere than
 * port 53): the filter below and the host table let that port in already.
 */
function steerRules(ns: Netns, r: EgressRules, always: string[]): string[] {
  if (r.steerPorts.length === 0) return [];
  const ports = `{ ${r.steerPorts.join(', ')} }`;
  return [
    `tcp dport != ${ports} return`,
    `ip daddr { ${[...always, ...PRIVATE_RANGES].join(', ')} } return`,
    ...[...setMatches('deny'), ...setMatches('allow')].map((m) => `${m} return`),
    `meta l4proto tcp dnat ip to ${ns.hostIp}:${DNS_PORT}`,
  ];
}

/**
 * UDP on a steered port (QUIC, HTTP/3) carries a name the proxy cannot read: refused unless
 * the user listed its address, whatever DNS taught (the client falls back to TCP, which the
 * proxy reads). Counted apart (`unread`) as well as in `denied`.
 */
function unreadRules(r: EgressRules): string[] {
  if (r.steerPorts.length === 0) return [];
  const udp = `udp dport { ${r.steerPorts.join(', ')} }`;
  return [
    `${udp} ip daddr @allow_net accept`,
    `${udp} ip daddr . udp dport @allow_svc accept`,
    `${udp} jump unread`,
  ];
}

/** The namespace's whole table, replaced in one transaction (PATCH applies atomically). */
export function policyScript(ns: Netns, r: EgressRules): string {
  const always = [...ALWAYS_DENIED, ...r.hostAddresses];
  const out = [
    'type filter hook output priority filter; policy accept;',
    'ct state established,related accept',
    'meta nfproto ipv6 jump deny',
    `ip daddr ${ns.hostIp} meta l4proto { tcp, udp } th dport ${DNS_PORT} accept`,
    `ip daddr { ${always.join(', ')} } jump deny`,
    ...(r.none ? ['jump deny'] : []),
    ...verdicts('deny'),
    ...unreadRules(r),
    ...verdicts('allow'),
    `ip daddr { ${PRIVATE_RANGES.join(', ')} } jump deny`,
    r.allowInternet ? 'accept' : 'jump deny',
  ];
  return [
    `table ${TABLE} {}`,
    `delete table ${TABLE}`,
    `table ${TABLE} {`,
    '  counter denied {}',
    '  counter unread {}',
    ...[...sets('allow', r.allow), ...sets('deny', r.deny)].map((s) => `  ${s}`),
    // Every DNS query (UDP or TCP) goes to this namespace's proxy, whatever server the guest
    // asked; web connections no address rule decides go to the name proxy.
    '  chain steer {',
    '    type nat hook output priority -100;',
    `    meta l4proto { tcp, udp } th dport 53 dnat ip to ${ns.hostIp}:${DNS_PORT}`,
    ...steerRules(ns, r, always).map((l) => `    ${l}`),
    '  }',
    '  chain deny {',
    '    counter name "denied"',
    '    meta l4proto tcp reject with tcp reset',
    '    reject with icmpx admin-prohibited',
    '  }',
    '  chain unread {',
    '    counter name "unread"',
    '    jump deny',
    '  }',
    '  chain out {',
    ...out.map((l) => `    ${l}`),
    '  }',
    '}',
    '',
  ].join('\n');
}

/** Install or replace a namespace's policy table. */
export async function applyPolicy(ns: Netns, r: EgressRules): Promise<void> {
  await inNetns(ns, 'nft', ['-f', '-'], policyScript(ns, r));
}

/** Add addresses from a DNS answer to one of the namespace's DNS sets, for `ttlS`. */
export async function addDnsElements(
  ns: Netns,
  set: string,
  items: string[],
  ttlS: number,
): Promise<void> {
  if (items.length === 0) return;
  const elems = items.map((i) => `${i} timeout ${ttlS}s`).join(', ');
  await inNetns(ns, 'nft', ['-f', '-'], `add element ${TABLE} ${set} { ${elems} }\n`);
}

/**
 * Packets the namespace's filter refused so far (0 when it has no table): all of them
 * (`denied`), or those refused as unreadable by the name proxy (`unread`: UDP on a steered port).
 */
export async function deniedCount(
  ns: Netns,
  counter: 'denied' | 'unread' = 'denied',
): Promise<number> {
  try {
    const { stdout } = await inNetns(ns, 'nft', [
      '-j',
      'list',
      'counter',
      ...TABLE.split(' '),
      counter,
    ]);
    const doc = JSON.parse(stdout) as { nftables: { counter?: { packets: number } }[] };
    return doc.nftables.find((x) => x.counter)?.counter?.packets ?? 0;
  } catch {
    return 0;
  }
}

/**
 * The host table: from a sandbox's veth only replies and DNS to its proxy reach the host;
 * nothing passes between two sandboxes, nothing from outside starts a connection into one,
 * and sandbox traffic leaving the host is masqueraded.
 */
export function hostScript(): string {
  const veth = `"${VETH_PREFIX}*"`;
  return [
    `table ${TABLE} {}`,
    `delete table ${TABLE}`,
    `table ${TABLE} {`,
    '  chain input {',
    '    type filter hook input priority filter - 10; policy accept;',
    `    iifname ${veth} ct state established,related accept`,
    `    iifname ${veth} meta l4proto { tcp, udp } th dport ${DNS_PORT} accept`,
    `    iifname ${veth} meta l4proto tcp reject with tcp reset`,
    `    iifname ${veth} reject with icmpx admin-prohibited`,
    '  }',
    '  chain forward {',
    '    type filter hook forward priority filter - 10; policy accept;',
    `    iifname ${veth} oifname ${veth} reject with icmpx admin-prohibited`,
    `    oifname ${veth} ct state established,related accept`,
    `    oifname ${veth} drop`,
    '  }',
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat;',
    `    ip saddr ${NETNS_SUBNET} oifname != ${veth} masquerade`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/**
 * Install (or refresh) the host table and turn on IPv4 forwarding. The setting found is
 * kept in a file the first time (not in memory): a daemon killed with SIGKILL leaves
 * forwarding on, and the next one must still know what to put back.
 */
export async function installHostTable(): Promise<void> {
  await run('nft', ['-f', '-'], { input: hostScript() });
  const { stdout } = await run('sysctl', ['-n', 'net.ipv4.ip_forward']);
  const found = stdout.trim();
  if (found === '1') return;
  if (!existsSync(FORWARDING_FILE)) {
    await mkdir(dirname(FORWARDING_FILE), { recursive: true, mode: 0o700 });
    await writeFile(FORWARDING_FILE, `${found}\n`);
  }
  await run('sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1']);
}

/** Remove the host table and put IPv4 forwarding back as forkd found it. Idempotent. */
export async function removeHostTable(): Promise<void> {
  await run('nft', ['delete', 'table', ...TABLE.split(' ')]).catch(() => undefined);
  const found = (await readFile(FORWARDING_FILE, 'utf8').catch(() => '')).trim();
  if (/^[01]$/.test(found) && found !== '1') {
    await run('sysctl', ['-q', '-w', `net.ipv4.ip_forward=${found}`]).catch(() => undefined);
  }
  await rm(FORWARDING_FILE, { force: true });
}

/** Whether a host table of forkd's exists (tests, start-up). */
export async function hostTableExists(): Promise<boolean> {
  const { stdout } = await run('nft', ['list', 'tables']).catch(() => ({ stdout: '' }));
  return stdout.split('\n').some((l) => l.trim() === `table ${TABLE}`);
}

/** Whether nft is installed and the kernel has nf_tables (doctor, start-up). */
export async function nftAvailable(): Promise<boolean> {
  try {
    await run('nft', ['list', 'tables']);
    return true;
  } catch {
    return false;
  }
}
