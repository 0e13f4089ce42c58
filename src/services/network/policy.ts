/**
 * Egress policy, as the user writes it and as the filter enforces it: parse and check each
 * `allow_out`/`deny_out` entry (CIDR, IP, `host:port`, hostname or `*.domain`), merge an
 * override over an inherited policy, turn a policy into the namespace's rules, and decide
 * what the DNS proxy and the name proxy (TLS SNI, HTTP Host) do with a name. No I/O here.
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { EgressRules, RuleList, Service } from '../../drivers/net/nft.js';
import { ForkdError } from '../../errors.js';

/** A sandbox's policy as stored and shown (`none`: no egress at all, DNS included). */
export interface Egress {
  none: boolean;
  allow_internet: boolean;
  allow_out: string[];
  deny_out: string[];
}

/** What a request may send: the `none` shortcut or any subset of the fields. */
export type EgressInput =
  'none' | { allow_internet?: boolean; allow_out?: string[]; deny_out?: string[] };

export const OPEN_EGRESS: Egress = {
  none: false,
  allow_internet: true,
  allow_out: [],
  deny_out: [],
};
export const NO_EGRESS: Egress = { none: true, allow_internet: false, allow_out: [], deny_out: [] };

/** One parsed list entry. */
type Entry =
  { kind: 'net'; net: string; port?: number } | { kind: 'host'; pattern: string; port?: number };

const HOSTNAME =
  /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const MAX_ENTRIES = 256;

function bad(field: string, entry: string, why: string): ForkdError {
  return new ForkdError('bad_request', `${field}: "${entry}" ${why}`, { field, value: entry });
}

function parsePort(field: string, entry: string, text: string): number {
  const port = Number(text);
  if (!/^\d+$/.test(text) || port < 1 || port > 65535) {
    throw bad(field, entry, 'has a port outside 1–65535');
  }
  return port;
}

function parseNet(field: string, entry: string, text: string): string | undefined {
  const [ip, prefix, extra] = text.split('/');
  if (extra !== undefined || !ip) return undefined;
  if (isIPv6(ip)) throw bad(field, entry, 'is IPv6: sandboxes have IPv4 only');
  if (!isIPv4(ip)) return undefined;
  if (prefix === undefined) return ip;
  const n = Number(prefix);
  if (!/^\d+$/.test(prefix) || n > 32) throw bad(field, entry, 'has a prefix outside /0–/32');
  return `${ip}/${n}`;
}

/** Parse one entry; `bad_request` naming it when it is none of the accepted forms. */
export function parseEntry(field: string, raw: string): Entry {
  const entry = raw.trim().toLowerCase();
  const colon = entry.lastIndexOf(':');
  const hasPort = colon > 0 && entry.indexOf(':') === colon; // one colon: host:port
  if (entry.includes(':') && !hasPort) throw bad(field, raw, 'is IPv6: sandboxes have IPv4 only');
  const host = hasPort ? entry.slice(0, colon) : entry;
  const port = hasPort ? parsePort(field, raw, entry.slice(colon + 1)) : undefined;
  const net = parseNet(field, raw, host);
  if (net) return { kind: 'net', net, port };
  if (host.length <= 253 && HOSTNAME.test(host) && !/^[\d.]+$/.test(host)) {
    return { kind: 'host', pattern: host, port };
  }
  throw bad(field, raw, 'is not a CIDR, an IPv4 address, a hostname or one of them with :port');
}

function checkList(field: string, list: string[] | undefined): string[] | undefined {
  if (list === undefined) return undefined;
  if (list.length > MAX_ENTRIES) {
    throw new ForkdError('bad_request', `${field} has more than ${MAX_ENTRIES} entries`, { field });
  }
  for (const e of list) parseEntry(field, e);
  return list.map((e) => e.trim().toLowerCase());
}

/**
 * An override over an inherited policy: `none` replaces it; fields given replace theirs,
 * the rest is inherited (a parent online for installs, its children offline).
 */
export function mergeEgress(base: Egress, input: EgressInput | undefined): Egress {
  if (input === undefined) return base;
  if (input === 'none') return NO_EGRESS;
  return {
    none: false,
    allow_internet: input.allow_internet ?? (base.none ? false : base.allow_internet),
    allow_out: checkList('allow_out', input.allow_out) ?? base.allow_out,
    deny_out: checkList('deny_out', input.deny_out) ?? base.deny_out,
  };
}

function ruleList(entries: string[], field: string): RuleList {
  const nets: string[] = [];
  const services: Service[] = [];
  for (const e of entries.map((x) => parseEntry(field, x))) {
    if (e.kind !== 'net') continue;
    if (e.port === undefined) nets.push(e.net);
    else services.push({ net: e.net, port: e.port });
  }
  return { nets, services };
}

/** The namespace rules of a policy (hostnames become addresses as DNS answers come in). */
export function egressRules(e: Egress, hostAddresses: string[]): EgressRules {
  return {
    none: e.none,
    allowInternet: e.allow_internet,
    allow: ruleList(e.allow_out, 'allow_out'),
    deny: ruleList(e.deny_out, 'deny_out'),
    hostAddresses,
    steerPorts: e.none ? [] : steerPorts(e),
  };
}

/** Ports the name proxy inspects: none when no entry is a hostname, else web and named ones. */
function steerPorts(e: Egress): number[] {
  const hosts = [
    ...e.allow_out.map((x) => parseEntry('allow_out', x)),
    ...e.deny_out.map((x) => parseEntry('deny_out', x)),
  ].filter((x) => x.kind === 'host');
  if (hosts.length === 0) return [];
  const ports = new Set([80, 443]);
  for (const h of hosts) if (h.port !== undefined) ports.add(h.port);
  return [...ports].sort((a, b) => a - b);
}

function matches(pattern: string, name: string): boolean {
  if (pattern.startsWith('*.')) return name.endsWith(pattern.slice(1));
  return name === pattern;
}

/** Hostname entries of a list that match `name`, with their ports (undefined: any port). */
function hostMatches(entries: string[], field: string, name: string): (number | undefined)[] {
  return entries
    .map((x) => parseEntry(field, x))
    .filter((e): e is Extract<Entry, { kind: 'host' }> => e.kind === 'host')
    .filter((e) => matches(e.pattern, name))
    .map((e) => e.port);
}

/** What the DNS proxy does with a query, and which DNS sets learn the answer's addresses. */
export interface DnsDecision {
  refuse: boolean;
  /** Ports (undefined = any) under which the answer's addresses join the allow/deny sets. */
  allow: (number | undefined)[];
  deny: (number | undefined)[];
}

/**
 * A denied hostname (without a port) is refused; so is any name when the sandbox has no
 * egress, or no internet and no allow entry for it. Otherwise the query is forwarded and
 * its answer's addresses join the sets of every entry that names it.
 */
export function decideName(e: Egress, name: string): DnsDecision {
  const deny = hostMatches(e.deny_out, 'deny_out', name);
  const allow = hostMatches(e.allow_out, 'allow_out', name);
  const refuse = e.none || deny.includes(undefined) || (!e.allow_internet && allow.length === 0);
  return { refuse, allow, deny };
}

/** Why the name proxy refused a connection (the `reason` of its audit entry and metric). */
export type NameRefusal =
  | 'egress_none'
  | 'no_name'
  | 'name_denied'
  | 'name_not_allowed'
  | 'name_unresolved'
  | 'name_address'
  | 'ech'
  | 'h2c'
  | 'hello';

/**
 * The name proxy's verdict before any lookup: refused (and why), passed, or passed only if
 * the name resolves (by the daemon's resolver) to where the connection goes.
 */
export type NameJudgement = { pass: false; reason: NameRefusal } | { pass: true; verify?: string };

/**
 * A connection the name proxy holds (its address matched no rule): what it cannot read is
 * refused whatever the policy; the name the client sent (SNI or Host) is judged as a DNS
 * query for it would be, with the entries' ports; a connection let through only because a
 * hostname entry allows its name must go to an address that name resolves to (the guest's
 * word is not enough); one without a name, like one to an unlisted address, passes only
 * with internet.
 */
export function judgeConnection(
  e: Egress,
  peeked: { name?: string; unreadable?: 'ech' | 'h2c' | 'hello' },
  port: number,
): NameJudgement {
  if (e.none) return { pass: false, reason: 'egress_none' };
  if (peeked.unreadable) return { pass: false, reason: peeked.unreadable };
  const name = peeked.name;
  if (name === undefined) return e.allow_internet ? { pass: true } : refuse('no_name');
  const d = decideName(e, name);
  const names = (ports: (number | undefined)[]) => ports.some((p) => p === undefined || p === port);
  if (names(d.deny)) return refuse('name_denied');
  if (e.allow_internet) return { pass: true };
  return names(d.allow) ? { pass: true, verify: name } : refuse('name_not_allowed');
}

function refuse(reason: NameRefusal): NameJudgement {
  return { pass: false, reason };
}
