/**
 * The load and soak workloads (issue 21), shared by the benchmarks that print their figures
 * (bench/load.ts, bench/soak.ts, long runs) and the e2e test that runs them short and
 * asserts on them (test/e2e/load/load.test.ts), so both measure the same thing.
 *  - load: C concurrent SDK clients, each looping over exec (70 %), a 4 KiB file write and
 *    read back (20 %), fork + exec + kill (5 %), branch + remove (5 %); at most `heavy` forks
 *    or branches in flight (a client finding none free runs an exec instead, so the daemon's
 *    `capacity` answer is not what is measured). Client 0 starts with a fork and client 1
 *    with a branch, so a short run has every kind. A branch goes to a target no other
 *    branch + remove is using: one client's removal of its branch while another branches
 *    the same source is refused `snapshot_in_use` when the new branch came first (it is
 *    built on the one removed), as it should be; that is a conflict, not load.
 *  - soak: one round forks N children, writes and reads a file and runs a command in each,
 *    and kills them; `sampleDaemon` takes what must come back to its baseline afterwards.
 */
import { readdir, readFile, readlink } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { isForkdError, type Sandbox, type Snapshot } from '@forkd/sdk';
import { join } from 'node:path';
import { NETNS_OWNERS, NETNS_PREFIX } from '../src/drivers/net/netns.js';
import { run } from '../src/util/exec.js';
import { percentile } from './stats.js';

export type LoadOp = 'exec' | 'files' | 'fork' | 'branch';

export interface LoadOptions {
  clients: number;
  seconds: number;
  /** Forks and branches in flight at most. */
  heavy: number;
  /** Running sandboxes the exec, files and branch operations go to. */
  targets: Sandbox[];
  /** The snapshot forks are made from. */
  snapshot: Snapshot;
}

export interface LoadResult {
  /** Milliseconds per completed operation. */
  samples: Record<LoadOp, number[]>;
  /** `op: code` → count. */
  errors: Map<string, number>;
  /** `op: code` → the first such error's message (what to look for in the daemon's log). */
  firstMessages: Map<string, string>;
  wallSeconds: number;
}

const any = <T>(xs: T[]): T => xs[Math.floor(Math.random() * xs.length)]!;

/** Targets under a branch + remove now. */
const branching = new Set<Sandbox>();

async function once(op: LoadOp, o: LoadOptions, client: number): Promise<void> {
  const free = o.targets.filter((t) => !branching.has(t));
  const sbx = any(op === 'branch' && free.length > 0 ? free : o.targets);
  if (op === 'exec') {
    const r = await sbx.commands.run(['echo', `c${client}`]);
    if (r.exitCode !== 0 || r.stdout !== `c${client}\n`) throw new Error(`exec: ${r.stdout}`);
  } else if (op === 'files') {
    const body = Buffer.alloc(4096, client % 256);
    const path = `/tmp/load-${client}.bin`;
    await sbx.files.write(path, body);
    const back = Buffer.from(await sbx.files.read(path));
    if (!back.equals(body)) throw new Error('files: read back differs');
  } else if (op === 'fork') {
    const { sandboxes, failed } = await o.snapshot.fork({ n: 1 });
    if (failed[0]) throw failed[0].error;
    for (const child of sandboxes) {
      await child.commands.run(['true']);
      await child.kill();
    }
  } else {
    branching.add(sbx);
    try {
      const { snapshot: branched } = await sbx.branch();
      await branched.remove();
    } finally {
      branching.delete(sbx);
    }
  }
}

/** Run the load mix for `seconds` (operations in flight at the end finish). */
export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  const samples: Record<LoadOp, number[]> = { exec: [], files: [], fork: [], branch: [] };
  const errors = new Map<string, number>();
  const firstMessages = new Map<string, string>();
  let heavyInFlight = 0;
  const pick = (client: number, first: boolean): LoadOp => {
    const r = Math.random();
    let wanted: LoadOp = r < 0.7 ? 'exec' : r < 0.9 ? 'files' : r < 0.95 ? 'fork' : 'branch';
    if (first && client < 2) wanted = client === 0 ? 'fork' : 'branch';
    if ((wanted === 'fork' || wanted === 'branch') && heavyInFlight >= o.heavy) return 'exec';
    return wanted;
  };
  const client = async (i: number, until: number) => {
    for (let first = true; Date.now() < until; first = false) {
      const op = pick(i, first);
      const heavy = op === 'fork' || op === 'branch';
      if (heavy) heavyInFlight++;
      const t0 = performance.now();
      try {
        await once(op, o, i);
        samples[op].push(performance.now() - t0);
      } catch (e) {
        const code = isForkdError(e) ? e.code : String(e).slice(0, 80);
        const key = `${op}: ${code}`;
        errors.set(key, (errors.get(key) ?? 0) + 1);
        if (!firstMessages.has(key)) firstMessages.set(key, String(e).slice(0, 500));
      } finally {
        if (heavy) heavyInFlight--;
      }
    }
  };
  const t0 = Date.now();
  const until = t0 + o.seconds * 1000;
  await Promise.all(Array.from({ length: o.clients }, (_, i) => client(i, until)));
  return { samples, errors, firstMessages, wallSeconds: (Date.now() - t0) / 1000 };
}

function line(label: string, xs: number[]): string {
  if (xs.length === 0) return `${label}: none`;
  const f = (n: number) => `${n.toFixed(1)} ms`;
  return `${label}: n=${xs.length}, p50 ${f(percentile(xs, 50))}, p99 ${f(percentile(xs, 99))}, max ${f(Math.max(...xs))}`;
}

/** n, p50, p99 and max per operation and overall, the requests held, every error by code. */
export function loadReport(r: LoadResult): string[] {
  const all = Object.values(r.samples).flat();
  const failures = [...r.errors.values()].reduce((a, b) => a + b, 0);
  return [
    ...(Object.keys(r.samples) as LoadOp[]).map((op) => line(op, r.samples[op])),
    line('all', all),
    `requests held: ${all.length} in ${r.wallSeconds.toFixed(1)} s (${(all.length / r.wallSeconds).toFixed(1)}/s), errors: ${failures}`,
    ...[...r.errors].map(
      ([what, n]) => `  error ${what}: ${n} (first: ${r.firstMessages.get(what)})`,
    ),
  ];
}

/** One soak round: fork `n`, a file and a command in each, kill them all. */
export async function soakRound(snapshot: Snapshot, n: number, i: number): Promise<void> {
  const { sandboxes, failed } = await snapshot.fork({ n });
  try {
    if (failed[0]) throw failed[0].error;
    for (const child of sandboxes) {
      await child.files.write('/tmp/soak.txt', `round ${i}\n`);
      const r = await child.commands.run(['cat', '/tmp/soak.txt']);
      if (r.stdout !== `round ${i}\n`) throw new Error(`round ${i}: read ${r.stdout}`);
    }
  } finally {
    for (const child of sandboxes) await child.kill();
  }
}

/** What a soak compares with its baseline. */
export interface DaemonSample {
  rssKiB: number;
  /** Open fds of the daemon, not counting clients' connections to its socket. */
  fds: number;
  /** Apparent size of the home. */
  diskKiB: number;
  qemus: number;
  /** `fkd-*` network namespaces of this daemon. */
  netns: number;
  availKiB: number;
}

async function statusKiB(pid: number, field: string): Promise<number> {
  const text = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
}

async function qemusUnder(dir: string): Promise<number> {
  let n = 0;
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const cmd = await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '');
    if (cmd.startsWith('qemu-system') && cmd.includes(dir)) n++;
  }
  return n;
}

/**
 * The daemon's fds without the connections clients hold open to `socket` (an accepted unix
 * socket carries its listener's path in /proc/net/unix): a client's idle keep-alive
 * connection is the client's to close, and would make the count depend on its pool.
 */
async function daemonFds(pid: number, socket: string): Promise<number> {
  const clients = new Set<string>();
  for (const row of (await readFile(`/proc/${pid}/net/unix`, 'utf8')).split('\n').slice(1)) {
    const f = row.trim().split(/\s+/);
    // Num RefCount Protocol Flags Type St Inode Path; flags 00010000: the listener itself.
    if (f[7] === socket && f[3] !== '00010000') clients.add(`socket:[${f[6]}]`);
  }
  let n = 0;
  for (const fd of await readdir(`/proc/${pid}/fd`)) {
    const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    if (target && !clients.has(target)) n++;
  }
  return n;
}

/**
 * The `fkd-*` network namespaces the daemon `pid` owns (forkd records each one's daemon in
 * NETNS_OWNERS): the host's count moves with every other daemon on it.
 */
async function netnsOf(pid: number): Promise<number> {
  let n = 0;
  for (const name of await readdir(NETNS_OWNERS).catch(() => [] as string[])) {
    if (!name.startsWith(NETNS_PREFIX) || name.endsWith('.json')) continue;
    const owner = await readFile(join(NETNS_OWNERS, name), 'utf8').catch(() => '');
    if (Number(owner.trim()) === pid) n++;
  }
  return n;
}

/** Sample the daemon `pid` of the home `dir`, listening on `socket`. */
export async function sampleDaemon(
  pid: number,
  dir: string,
  socket: string,
): Promise<DaemonSample> {
  const meminfo = await readFile('/proc/meminfo', 'utf8');
  const du = await run('du', ['-sk', '--apparent-size', dir]);
  return {
    rssKiB: await statusKiB(pid, 'VmRSS'),
    fds: await daemonFds(pid, socket),
    diskKiB: Number(du.stdout.split('\t')[0]),
    qemus: await qemusUnder(dir),
    netns: await netnsOf(pid),
    availKiB: Number(/^MemAvailable:\s+(\d+)/m.exec(meminfo)?.[1] ?? NaN),
  };
}

/**
 * A sample once the daemon is idle: after the last kill it still reaps QEMUs and refills its
 * snapshots' pools. With `back`, poll until `back(sample)` holds (a figure that leaked never
 * gets there); without, until fds, QEMUs and netns read the same twice 1 s apart. Up to
 * `maxMs`, then the last sample.
 */
export async function settledSample(
  take: () => Promise<DaemonSample>,
  back?: (s: DaemonSample) => boolean,
  maxMs = 20_000,
): Promise<DaemonSample> {
  const deadline = Date.now() + maxMs;
  const key = (s: DaemonSample) => `${s.fds}/${s.qemus}/${s.netns}`;
  let last = await take();
  while (!back?.(last) && Date.now() < deadline) {
    await sleep(1000);
    const next = await take();
    if (!back && key(next) === key(last)) return next;
    last = next;
  }
  return last;
}

export const showSample = (s: DaemonSample) =>
  `rss ${(s.rssKiB / 1024).toFixed(1)} MiB, fds ${s.fds}, disk ${(s.diskKiB / 1024).toFixed(1)} MiB, qemus ${s.qemus}, fkd netns ${s.netns}, host MemAvailable ${(s.availKiB / 1024).toFixed(0)} MiB`;

/** Each figure's change from `base` to `end`, as one line. */
export const showDrift = (base: DaemonSample, end: DaemonSample) =>
  `rss ${((end.rssKiB - base.rssKiB) / 1024).toFixed(1)} MiB, fds ${end.fds - base.fds}, ` +
  `disk ${((end.diskKiB - base.diskKiB) / 1024).toFixed(1)} MiB, qemus ${end.qemus - base.qemus}, ` +
  `fkd netns ${end.netns - base.netns}, host MemAvailable ${((end.availKiB - base.availKiB) / 1024).toFixed(0)} MiB`;
