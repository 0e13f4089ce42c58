/**
 * Per-sandbox network namespaces (root only): `fkd-N` with a veth pair to the host
 * (`fkdh-N` ↔ the namespace's `eth0`), a /30 out of 10.231.0.0/16 numbered by N, a default
 * route to the host end and IPv6 off. QEMU's user networking runs inside, so the guest's NAT
 * and every socket it opens belong to that namespace and its packet filter; deleting the
 * namespace drops its veth, its rules and its connection tracking at once.
 */
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, readlink, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../../util/exec.js';
import { pidAlive } from '../../util/pid.js';
import { HOST_STATE_DIR, withHostLock } from './host-lock.js';

/** Where `ip netns` keeps its namespaces (bind mounts). */
export const NETNS_DIR = '/run/netns';
/** Name prefixes: namespaces `fkd-N`, host ends of their veths `fkdh-N`. */
export const NETNS_PREFIX = 'fkd-';
export const VETH_PREFIX = 'fkdh-';
/**
 * Which daemon made each namespace (its pid, one file per namespace): the index space is
 * the host's, shared by every daemon on it, and a daemon's start-up sweep must not take
 * the pool of another one that is running (a second FORKD_HOME, a test's daemon).
 */
export const NETNS_OWNERS = HOST_STATE_DIR;

/**
 * The namespaces each network service alive in this process holds (name → owner). Owner
 * files name a pid, and two daemons' services in one process (a test's two nodes) share
 * it: the second one's start-up sweep took the first one's pool for its own leftovers, and
 * both then leased `fkd-0` (their DNS proxies collided on 10.231.0.1:53). Kept in memory so
 * the owner file stays what every forkd version reads (a pid alone).
 */
const heldHere = new Map<string, string>();
let ownerSeq = 0;

/** A new owner for the namespaces a network service makes; {@link endOwner} when it closes. */
export function newOwner(): string {
  return `${process.pid}.${++ownerSeq}`;
}

/** The service closed: a later sweep in this process may take what it left. */
export function endOwner(owner: string): void {
  for (const [name, o] of heldHere) if (o === owner) heldHere.delete(name);
}
/** Every namespace's /30 comes out of this /16 (16 384 of them). */
export const NETNS_SUBNET = '10.231.0.0/16';
const MAX_INDEX = 16_383;

/** One namespace and the addresses of its veth pair. */
export interface Netns {
  index: number;
  name: string;
  /** The path `nsenter --net=` takes. */
  path: string;
  veth: string;
  /** The host end's address (the namespace's gateway). */
  hostIp: string;
  /** The namespace end's address (the source of every packet the sandbox sends out). */
  nsIp: string;
}

/** The names and addresses of namespace N. */
export function netnsOf(index: number): Netns {
  const base = index * 4;
  const ip = (n: number) => `10.231.${(base + n) >> 8}.${(base + n) & 255}`;
  const name = `${NETNS_PREFIX}${index}`;
  return {
    index,
    name,
    path: `${NETNS_DIR}/${name}`,
    veth: `${VETH_PREFIX}${index}`,
    hostIp: ip(1),
    nsIp: ip(2),
  };
}

/** Indexes of the forkd namespaces that exist on this host now. */
export async function listNetns(): Promise<number[]> {
  const names = await readdir(NETNS_DIR).catch(() => [] as string[]);
  return names
    .filter((n) => n.startsWith(NETNS_PREFIX) && /^\d+$/.test(n.slice(NETNS_PREFIX.length)))
    .map((n) => Number(n.slice(NETNS_PREFIX.length)));
}

/** Run a command inside a namespace (`nsenter --net`: no mount namespace of its own). */
export function inNetns(ns: Netns, file: string, args: string[], input?: string) {
  return runInput('nsenter', [`--net=${ns.path}`, '--', file, ...args], input);
}

/**
 * Make a fresh namespace with the lowest free index. It is added and its owner recorded
 * under the host lock: another daemon's start-up sweep (also under it) would otherwise see
 * an ownerless namespace and delete it.
 */
export async function createNetns(taken: Set<number>, owner: string): Promise<Netns> {
  const ns = await withHostLock(() => claimIndex(taken, owner));
  try {
    await wire(ns);
    return ns;
  } catch (e) {
    await deleteNetns(ns);
    throw e;
  }
}

/** Add the lowest free namespace and record this process as its owner (under the lock). */
async function claimIndex(taken: Set<number>, owner: string): Promise<Netns> {
  for (let i = 0; i <= MAX_INDEX; i++) {
    if (taken.has(i) || existsSync(netnsOf(i).path)) continue;
    const ns = netnsOf(i);
    try {
      await run('ip', ['netns', 'add', ns.name]);
    } catch {
      continue; // a daemon of an older forkd (no lock) took it meanwhile
    }
    try {
      await recordOwner(ns, owner);
      return ns;
    } catch (e) {
      await deleteNetns(ns);
      throw e;
    }
  }
  throw new Error(`no free network namespace index under ${NETNS_SUBNET}`);
}

async function wire(ns: Netns): Promise<void> {
  await runInput(
    'ip',
    ['-batch', '-'],
    [
      `link add ${ns.veth} type veth peer name eth0 netns ${ns.name}`,
      `addr add ${ns.hostIp}/30 dev ${ns.veth}`,
      `link set ${ns.veth} up`,
    ].join('\n'),
  );
  await runInput(
    'ip',
    ['-n', ns.name, '-batch', '-'],
    [
      `addr add ${ns.nsIp}/30 dev eth0`,
      'link set lo up',
      'link set eth0 up',
      `route add default via ${ns.hostIp}`,
    ].join('\n'),
  );
  // IPv6 is off in the namespace: the policy is written for IPv4 only.
  await inNetns(ns, 'sysctl', [
    '-q',
    '-w',
    'net.ipv6.conf.all.disable_ipv6=1',
    'net.ipv6.conf.default.disable_ipv6=1',
    // A confined QEMU (its own uid, no capabilities) forwards guest ports below 1024 too.
    'net.ipv4.ip_unprivileged_port_start=0',
  ]);
}

/** The processes that run in the namespace (a sandbox's QEMU). */
export async function netnsPids(ns: Netns): Promise<number[]> {
  const { stdout } = await run('ip', ['netns', 'pids', ns.name]).catch(() => ({ stdout: '' }));
  return stdout
    .split(/\s+/)
    .filter((p) => /^\d+$/.test(p))
    .map(Number);
}

/** Whether any process runs in the namespace (an adopted sandbox's QEMU). */
export async function netnsInUse(ns: Netns): Promise<boolean> {
  return (await netnsPids(ns)).length > 0;
}

/**
 * Delete a namespace (its veth, rules and conntrack go with it). Idempotent. The namespace
 * itself goes last: once it is gone another daemon may claim its index (claimIndex, under the
 * host lock, which a daemon's close does not hold), and an owner record removed after that
 * would be the new owner's, leaving its namespace to the next sweep.
 */
export async function deleteNetns(ns: Netns): Promise<void> {
  await run('ip', ['link', 'del', ns.veth]).catch(() => undefined);
  heldHere.delete(ns.name);
  await rm(join(NETNS_OWNERS, ns.name), { force: true });
  await rm(stateFile(ns), { force: true });
  if (existsSync(ns.path)) await run('ip', ['netns', 'del', ns.name]).catch(() => undefined);
}

/** `owner` ({@link newOwner}) of this process owns the namespace now (made it, or re-adopted its sandbox). */
export async function recordOwner(ns: Netns, owner: string): Promise<void> {
  heldHere.set(ns.name, owner);
  await mkdir(NETNS_OWNERS, { recursive: true, mode: 0o700 });
  await writeFile(join(NETNS_OWNERS, ns.name), `${process.pid}\n`);
}

function stateFile(ns: Netns): string {
  return join(NETNS_OWNERS, `${ns.name}.json`);
}

/**
 * What a daemon needs to take a namespace's sandbox over after a restart (its id, policy,
 * ports), kept next to the namespace: it lives exactly as long as the namespace does.
 * Written whole and renamed, so a daemon killed mid-write leaves the previous version.
 */
export async function writeNetnsState(ns: Netns, state: unknown): Promise<void> {
  await mkdir(NETNS_OWNERS, { recursive: true, mode: 0o700 });
  const tmp = `${stateFile(ns)}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(state)}\n`, { mode: 0o600 });
  await rename(tmp, stateFile(ns));
}

/** The state a daemon wrote for a namespace, or undefined (a pool member, none written). */
export async function readNetnsState(ns: Netns): Promise<unknown> {
  const text = await readFile(stateFile(ns), 'utf8').catch(() => undefined);
  try {
    return text === undefined ? undefined : (JSON.parse(text) as unknown);
  } catch {
    return undefined;
  }
}

/** The forkd namespace a process runs in (matched by the namespace's inode), if any. */
export async function netnsOfPid(pid: number): Promise<Netns | undefined> {
  const link = await readlink(`/proc/${pid}/ns/net`).catch(() => '');
  const inode = /^net:\[(\d+)\]$/.exec(link)?.[1];
  if (!inode) return undefined;
  for (const index of await listNetns()) {
    const ns = netnsOf(index);
    const st = await stat(ns.path).catch(() => undefined);
    if (st && String(st.ino) === inode) return ns;
  }
  return undefined;
}

/** Where the IPv4 forwarding setting forkd found is kept until the last namespace goes. */
export const FORWARDING_FILE = join(NETNS_OWNERS, 'ip_forward');

/** The pid of the process that made the namespace (or took its sandbox over), if recorded. */
export async function ownerOf(ns: Netns): Promise<number | undefined> {
  const text = await readFile(join(NETNS_OWNERS, ns.name), 'utf8').catch(() => '');
  const pid = Number(text.trim());
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/**
 * True when another daemon that is still alive holds the namespace: another live process,
 * or another network service of this process than `self` that has not closed.
 */
export async function ownedByOther(ns: Netns, self?: string): Promise<boolean> {
  const pid = await ownerOf(ns);
  if (pid === undefined) return false;
  if (pid !== process.pid) return pidAlive(pid);
  const holder = heldHere.get(ns.name);
  return holder !== undefined && holder !== self;
}

/**
 * Delete the namespaces no process runs in and no other live process owns (a dead daemon's
 * pool, sandboxes that ended while no daemon ran); `keepOwn` also keeps this process's
 * (a test's cleanup, while services of its own still run); `self` is the sweeping
 * service's owner. Call under the host lock.
 */
export async function sweepNetns(opts: { keepOwn?: boolean; self?: string } = {}): Promise<void> {
  for (const index of await listNetns()) {
    const ns = netnsOf(index);
    if (await ownedByOther(ns, opts.self)) continue;
    if (opts.keepOwn && (await ownerOf(ns)) === process.pid) continue;
    if (!(await netnsInUse(ns))) await deleteNetns(ns);
  }
}

function runInput(file: string, args: string[], input?: string) {
  return run(file, args, { input, timeoutMs: 30_000 });
}
