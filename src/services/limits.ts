/**
 * Resource limits of sandboxes (docs/limits.md): what a sandbox gets (the request, else
 * what its snapshot's source had, else the daemon's defaults), whether a value makes sense
 * (memory at least the guest's RAM, a CPU quota within the host's cores, a known unit), and
 * the cgroup of each sandbox's QEMU — made when its QEMU starts, its limits rewritten when a
 * pooled QEMU is handed to a fork, re-found after a daemon restart, removed when it ends.
 *
 * The cgroups of one daemon live under `forkd-<hash of FORKD_HOME>/<sandbox id>` in the
 * daemon's own cgroup, so daemons with different homes on one host never touch each
 * other's, and a sweep at start removes any this daemon's sandboxes no longer need.
 */
import { createHash } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LimitsRequestT } from '../contract/schemas.js';
import { LIMIT_RANGES, readSize } from '../contract/rules.js';
import {
  Cgroup,
  detectCgroups,
  vacateForChildren,
  type CgroupLayout,
  type CgroupLimits,
  type CgroupUsage,
  type CgroupVersion,
} from '../drivers/host/cgroup.js';
import { memAvailable } from '../drivers/host/meminfo.js';
import { ForkdError } from '../errors.js';
import type { StoredLimits } from '../store/sandboxes.js';

const MiB = 1024 * 1024;

/** A sandbox's effective limits as stored and shown; null = no limit of that kind. */
export interface Limits {
  memory_bytes: number | null;
  cpu: number | null;
  pids: number | null;
}

/** The daemon's defaults (`forkd daemon --default-memory/--default-cpu/--default-pids`). */
export interface LimitDefaults {
  /** Bytes, `auto` (guest RAM + {@link QEMU_OVERHEAD_MIB}) or null (none). */
  memory: number | 'auto' | null;
  /** Cores, `auto` (the sandbox's vCPUs, at most half the host) or null (none). */
  cpu: number | 'auto' | null;
  pids: number | null;
}

/**
 * What QEMU needs beside guest RAM under the default memory limit: its own heap, the kernel
 * blob of a booted sandbox (~14 MiB), and TCG's translation buffer, which grows with the code
 * the guest runs (12 MiB after a `dd`; notes/qemu-measurements.md) up to its 1 GiB reserve.
 */
export const QEMU_OVERHEAD_MIB = 256;
export const DEFAULT_PIDS = 512;

export const AUTO_DEFAULTS: LimitDefaults = { memory: 'auto', cpu: 'auto', pids: DEFAULT_PIDS };

/** The host's cores, the most a CPU quota can use. */
export function hostCores(): number {
  return availableParallelism();
}

/**
 * `512M`, `1.5G`, `1073741824` (bytes) → bytes. Units are powers of 1024 (K, M, G, T, with
 * or without `i`/`B`, any case); anything else is a `bad_request` naming `field`.
 */
export function parseSize(text: string, field: string): number {
  const size = readSize(text);
  if (!size) {
    throw new ForkdError(
      'bad_request',
      `${field} "${text}" is not a size: write a number and a unit, e.g. 768M or 2G`,
      { field, value: text },
    );
  }
  if ('unknownUnit' in size) {
    throw new ForkdError(
      'bad_request',
      `${field} "${text}": unknown unit "${size.unknownUnit}"; use K, M, G or T (powers of 1024), e.g. 768M`,
      { field, value: text, units: ['K', 'M', 'G', 'T'] },
    );
  }
  return size.bytes;
}

/** Bytes as the CLI shows them: `768M`, `1.5G`. */
export function formatSize(bytes: number): string {
  const units = ['T', 'G', 'M', 'K'] as const;
  for (const [i, u] of units.entries()) {
    const f = 1024 ** (4 - i);
    if (bytes >= f && (bytes % (f / 1024) === 0 || u === 'K')) {
      return `${Number((bytes / f).toFixed(2))}${u}`;
    }
  }
  return `${bytes}`;
}

/** What a sandbox's limits are resolved against. */
export interface LimitContext {
  memoryMiB: number;
  cpus: number;
  defaults: LimitDefaults;
  /** A fork's snapshot's limits (its source sandbox's), when it recorded them. */
  inherited?: Limits;
  /** Override for tests; default {@link hostCores}. */
  cores?: number;
}

/** The defaults as numbers for one sandbox. */
export function defaultLimits(ctx: LimitContext): Limits {
  const { memory, cpu, pids } = ctx.defaults;
  const cores = ctx.cores ?? hostCores();
  const guest = ctx.memoryMiB * MiB;
  return {
    memory_bytes:
      memory === 'auto'
        ? guest + QEMU_OVERHEAD_MIB * MiB
        : memory === null
          ? null
          : Math.max(memory, guest), // a fixed default never undercuts a large guest
    cpu:
      cpu === 'auto' ? Math.min(ctx.cpus, cores / 2) : cpu === null ? null : Math.min(cpu, cores),
    pids,
  };
}

/**
 * A sandbox's limits: each asked-for value, else the inherited one, else the default; every
 * asked-for value is checked (`bad_request` naming `limits.<field>` and what is allowed).
 */
export function resolveLimits(req: LimitsRequestT | undefined, ctx: LimitContext): Limits {
  const base = ctx.inherited ?? defaultLimits(ctx);
  const out: Limits = { ...base };
  if (req?.memory !== undefined) out.memory_bytes = checkMemory(req.memory, ctx.memoryMiB);
  if (req?.cpu !== undefined) out.cpu = checkCpu(req.cpu, ctx.cores ?? hostCores());
  if (req?.pids !== undefined) out.pids = checkPids(req.pids);
  return out;
}

function checkMemory(text: string, memoryMiB: number): number {
  const bytes = parseSize(text, 'limits.memory');
  if (bytes >= memoryMiB * MiB) return bytes;
  throw new ForkdError(
    'bad_request',
    `limits.memory ${text} is less than the guest's ${memoryMiB} MiB of RAM: the limit caps guest RAM plus QEMU's overhead, so give at least ${memoryMiB}M (the default is ${memoryMiB + QEMU_OVERHEAD_MIB}M)`,
    { field: 'limits.memory', value: text, min: `${memoryMiB}M` },
  );
}

function checkCpu(cpu: number, cores: number): number {
  if (Number.isFinite(cpu) && cpu >= LIMIT_RANGES.cpu.min && cpu <= cores) return cpu;
  const why =
    cpu > cores
      ? `is more than this host's ${cores} cores`
      : `must be at least ${LIMIT_RANGES.cpu.min} (a quota in cores, e.g. 0.5)`;
  throw new ForkdError('bad_request', `limits.cpu ${cpu} ${why}`, {
    field: 'limits.cpu',
    value: cpu,
    min: LIMIT_RANGES.cpu.min,
    max: cores,
  });
}

function checkPids(pids: number): number {
  const { min, max } = LIMIT_RANGES.pids;
  if (Number.isInteger(pids) && pids >= min && pids <= max) return pids;
  throw new ForkdError(
    'bad_request',
    `limits.pids ${pids} must be an integer from ${min} to ${max}: it caps QEMU's threads, and QEMU needs a few dozen`,
    { field: 'limits.pids', value: pids, min, max },
  );
}

/** The daemon's `--default-memory`, `--default-cpu`, `--default-pids` as typed. */
export interface LimitDefaultFlags {
  memory?: string;
  cpu?: string;
  pids?: string;
}

/**
 * The daemon's default limits from its flags: each `auto` (or absent: the automatic
 * default), `none` (no limit of that kind), or a value (`bad_request` naming the flag).
 */
export function parseLimitDefaults(f: LimitDefaultFlags): LimitDefaults {
  const pick = <T>(text: string | undefined, auto: T, parse: (t: string) => T): T | null =>
    text === undefined || text === 'auto' ? auto : text === 'none' ? null : parse(text);
  return {
    memory: pick<number | 'auto'>(f.memory, 'auto', (t) => parseSize(t, '--default-memory')),
    cpu: pick<number | 'auto'>(f.cpu, 'auto', (t) => {
      const cpu = Number(t);
      if (Number.isFinite(cpu) && cpu >= LIMIT_RANGES.cpu.min) return cpu;
      throw new ForkdError(
        'bad_request',
        `--default-cpu must be auto, none or a number of cores (at least ${LIMIT_RANGES.cpu.min}), not "${t}"`,
      );
    }),
    pids: pick(f.pids, DEFAULT_PIDS, (t) => checkPids(Number(t))),
  };
}

/** Limits as the cgroup driver takes them. */
function toCgroup(l: Limits): CgroupLimits {
  return { memoryBytes: l.memory_bytes, cpuCores: l.cpu, pids: l.pids };
}

/** The cgroup parent of one daemon's sandboxes: named after its home, so daemons never mix. */
export function cgroupParentName(home: string): string {
  return `forkd-${createHash('sha256').update(home).digest('hex').slice(0, 10)}`;
}

/** The cgroup parent of the VMs `forkd run` boots without a daemon on `home`. */
export function runCgroupParent(home: string): string {
  return `${cgroupParentName(home)}-run`;
}

/** Where a VM's QEMU is accounted: a cgroup of `limiter`, with these limits. */
export interface Placement {
  limiter: Limiter;
  limits: StoredLimits;
}

/** What the host can enforce, for `forkd doctor` and the Limiter. */
export type Enforcement =
  { version: CgroupVersion; layout: CgroupLayout } | { version: null; reason: string };

/**
 * Whether limits can be enforced here: a cgroup layout exists, and a probe cgroup can be
 * made under `parent`, given limits, and removed (v2 refuses to hand controllers down from
 * a cgroup that holds processes; a read-only mount refuses everything).
 */
export async function probeEnforcement(parent: string): Promise<Enforcement> {
  const layout = await detectCgroups();
  if ('reason' in layout) return { version: null, reason: layout.reason };
  const probe = new Cgroup(layout, [parent, `probe-${process.pid}`]);
  try {
    await probe.create().catch(async (e: NodeJS.ErrnoException) => {
      if (e.code !== 'EBUSY') throw e;
      await vacateForChildren(layout, 'forkd-daemon'); // v2: the daemon's cgroup holds it
      await probe.create();
    });
    await probe.setLimits({ memoryBytes: 64 * MiB, cpuCores: 0.5, pids: 64 });
    return { version: layout.version, layout };
  } catch (e) {
    const why = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
    return { version: null, reason: `cannot create cgroups under this process's (${why})` };
  } finally {
    await probe.remove().catch(() => undefined);
    await new Cgroup(layout, [parent]).remove(0).catch(() => undefined);
  }
}

/** Memory that can still be given, and what holds it to that. */
export interface MemoryRoom {
  bytes: number;
  where: string;
}

/**
 * What more memory the host can give (MemAvailable), and every cgroup above the sandboxes'
 * of `parent` (that parent, the daemon's own cgroup, its slice): the least of them.
 */
export async function memoryRoom(e: Enforcement, parent: string): Promise<MemoryRoom> {
  const host = { bytes: await memAvailable(), where: 'the host' };
  if (e.version === null) return host;
  const free = await new Cgroup(e.layout, [parent]).memoryFree().catch(() => Infinity);
  return free < host.bytes ? { bytes: free, where: "the cgroups forkd's sandboxes are in" } : host;
}

export interface LimiterLog {
  warn(obj: object, msg: string): void;
}

/**
 * The cgroups of one daemon's sandboxes. When the host cannot enforce limits, every
 * operation is a no-op, sandboxes show `cgroup: null`, and a request that names limits is
 * refused (`unsupported`) rather than run unlimited. The host is probed once, on first use.
 */
export class Limiter {
  readonly defaults: LimitDefaults;
  private readonly parent: string;
  private probed: Promise<Enforcement> | undefined;
  /** Memory lent over each sandbox's limit for now (live copies running), by id. */
  private readonly lent = new Map<string, number>();

  constructor(
    private readonly opts: {
      home: string;
      defaults?: LimitDefaults;
      log?: LimiterLog;
      /** Tests of the layers above: no cgroups at all. */
      disabled?: boolean;
      /**
       * The parent cgroup's name, default {@link cgroupParentName} of `home`. `forkd run`
       * uses its own ({@link runCgroupParent}): a daemon's start-up sweep of its parent must
       * not meet the VMs of runs that are no sandboxes of it.
       */
      parent?: string;
    },
  ) {
    this.defaults = opts.defaults ?? AUTO_DEFAULTS;
    this.parent = opts.parent ?? cgroupParentName(opts.home);
  }

  /** What this host enforces (probed once). */
  enforcement(): Promise<Enforcement> {
    this.probed ??= (async () => {
      if (this.opts.disabled) return { version: null, reason: 'disabled' } as const;
      const e = await probeEnforcement(this.parent);
      if (e.version === null) {
        this.opts.log?.warn({ reason: e.reason }, 'sandboxes run without resource limits');
      }
      return e;
    })();
    return this.probed;
  }

  /** `v1`/`v2`, or null when limits are not enforced here. */
  async version(): Promise<CgroupVersion | null> {
    return (await this.enforcement()).version;
  }

  /** A sandbox's limits, refusing explicit ones this host cannot enforce. */
  async resolve(
    req: LimitsRequestT | undefined,
    ctx: Omit<LimitContext, 'defaults'>,
  ): Promise<StoredLimits> {
    const limits = resolveLimits(req, { ...ctx, defaults: this.defaults });
    const e = await this.enforcement();
    if (req && Object.keys(req).length > 0 && e.version === null) {
      throw new ForkdError(
        'unsupported',
        `this host cannot enforce resource limits (${e.reason}): run \`forkd doctor\`, or create the sandbox without limits`,
        { field: 'limits' },
      );
    }
    return { ...limits, cgroup: e.version };
  }

  private async cgroup(id: string): Promise<Cgroup | undefined> {
    const e = await this.enforcement();
    return e.version === null ? undefined : new Cgroup(e.layout, [this.parent, id]);
  }

  /**
   * Put a freshly spawned QEMU in its sandbox's cgroup with `limits` (called right after the
   * spawn, before the guest runs). A failure is a `setup_required`: the caller ends QEMU.
   */
  async place(id: string, limits: Limits, pid: number): Promise<void> {
    const cg = await this.cgroup(id);
    if (!cg) return;
    try {
      await cg.create();
      await cg.setLimits(toCgroup(limits));
      await cg.join(pid);
    } catch (e) {
      await cg.remove(0).catch(() => undefined);
      throw new ForkdError(
        'setup_required',
        `could not put sandbox ${id}'s QEMU in its cgroup (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}): run \`forkd doctor\``,
        { id },
      );
    }
  }

  /** Give a running sandbox's cgroup new limits (a pooled QEMU handed to a fork). */
  async apply(id: string, limits: Limits): Promise<void> {
    const cg = await this.cgroup(id);
    if (!cg) return;
    try {
      await cg.setLimits(toCgroup(this.withLent(id, limits)));
    } catch (e) {
      throw new ForkdError(
        'capacity',
        `could not set sandbox ${id}'s limits (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}): it may already use more memory than the new limit`,
        { id },
      );
    }
  }

  /** `limits` with what is lent to `id` now added to its memory limit. */
  private withLent(id: string, limits: Limits): Limits {
    const extra = this.lent.get(id) ?? 0;
    const memory = limits.memory_bytes;
    return { ...limits, memory_bytes: memory === null ? null : memory + extra };
  }

  /**
   * Lend sandbox `id` `bytes` of memory over its limit until the returned release is called
   * (docs/limits.md, "Live branch"): while a live branch copies, a frozen fork of its QEMU
   * shares the pages the guest wrote, and each one the guest writes again meanwhile is
   * copied, charged to the sandbox. With `check`, refused with `capacity`, naming what is
   * missing, when the host or a cgroup above the sandbox's cannot hold that much more. `limits`
   * reads the sandbox's limits at release (a change made meanwhile is kept). The release
   * never throws: a limit that cannot be put back at once (the guest used the room) is
   * retried for a while, then logged.
   */
  async lend(
    id: string,
    bytes: number,
    limits: () => Limits | null,
    opts: { what: string; check: boolean },
  ): Promise<() => Promise<void>> {
    if (opts.check) await this.checkRoom(id, bytes, opts.what);
    const cg = await this.cgroup(id);
    const memory = limits()?.memory_bytes ?? null;
    if (!cg || memory === null || bytes <= 0) return async () => undefined;
    this.lent.set(id, (this.lent.get(id) ?? 0) + bytes);
    try {
      await cg.setMemoryLimit(memory + (this.lent.get(id) ?? 0));
    } catch (e) {
      this.unlend(id, bytes);
      throw e;
    }
    let released = false;
    return async () => {
      if (released) return;
      released = true;
      this.unlend(id, bytes);
      const now = limits()?.memory_bytes ?? null;
      if (now !== null) await this.shrink(cg, id, now + (this.lent.get(id) ?? 0));
    };
  }

  private unlend(id: string, bytes: number): void {
    const left = (this.lent.get(id) ?? 0) - bytes;
    if (left > 0) this.lent.set(id, left);
    else this.lent.delete(id);
  }

  /** Refuse `bytes` more than the host or the daemon's cgroup has free (`capacity`). */
  private async checkRoom(id: string, bytes: number, what: string): Promise<void> {
    const room = await this.room();
    if (bytes <= room.bytes) return;
    const mib = (b: number) => `${Math.ceil(b / MiB)} MiB`;
    throw new ForkdError(
      'capacity',
      `${what} needs ${mib(bytes)} of memory beyond sandbox ${id}'s limit while it copies (the pages the sandbox writes meanwhile are copied on write), and ${room.where} has ${mib(room.bytes)} free: ${mib(bytes - room.bytes)} missing. Free memory, or branch with mode "copy" (the sandbox pauses for the copy instead)`,
      { id, needed_bytes: bytes, free_bytes: room.bytes, missing_bytes: bytes - room.bytes },
    );
  }

  /**
   * What more memory the host can give, and every cgroup above the sandboxes' (the daemon's
   * parent of them, the daemon's own, its slice): the least of them, and which it is.
   */
  async room(): Promise<{ bytes: number; where: string }> {
    const host = { bytes: await memAvailable(), where: 'the host' };
    const e = await this.enforcement();
    if (e.version === null) return host;
    const free = await new Cgroup(e.layout, [this.parent]).memoryFree().catch(() => Infinity);
    return free < host.bytes
      ? { bytes: free, where: "the cgroups forkd's sandboxes are in" }
      : host;
  }

  /**
   * Put a lent memory limit back to `target`: once the sandbox uses no more than that (its
   * frozen fork's pages are freed as it is reaped), so the kernel need not reclaim (v1
   * refuses, v2 would OOM-kill). Gives up after 20 s with a warning; the limit stays higher.
   */
  private async shrink(cg: Cgroup, id: string, target: number): Promise<void> {
    const deadline = Date.now() + 20_000;
    let last: unknown;
    while (Date.now() < deadline) {
      const { usage } = await cg.memory().catch(() => ({ usage: 0 }));
      if (usage <= target) {
        const err = await cg.setMemoryLimit(target).then(
          () => undefined,
          (e: unknown) => e,
        );
        if (!err) return;
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // the sandbox is gone
        last = err;
      }
      await sleep(100);
    }
    this.opts.log?.warn(
      { sandbox: id, target, err: last },
      'a memory limit lent for a live copy could not be put back yet: the sandbox uses more',
    );
  }

  /**
   * After a daemon restart: the re-adopted QEMU of `id` is in its cgroup with its limits
   * (made again if someone removed it; joining twice is harmless).
   */
  async reattach(id: string, limits: Limits, pid: number): Promise<void> {
    const cg = await this.cgroup(id);
    if (!cg) return;
    await cg.create();
    await cg.setLimits(toCgroup(limits));
    await cg.join(pid);
  }

  /** What a sandbox's QEMU used, or undefined when limits are off or it has no cgroup. */
  async usage(id: string): Promise<CgroupUsage | undefined> {
    const cg = await this.cgroup(id);
    if (!cg || !(await cg.exists())) return undefined;
    return cg.usage();
  }

  /**
   * Remove a sandbox's cgroup once its QEMU is gone, and the daemon's parent with it when it
   * was the last (a parent with children refuses at once; a sibling made meanwhile makes the
   * parent again). A cgroup that will not go is logged.
   */
  async remove(id: string): Promise<void> {
    const cg = await this.cgroup(id);
    if (!cg) return;
    const removed = await cg.remove().catch(() => false);
    await this.close();
    if (!removed) {
      this.opts.log?.warn(
        { sandbox: id, procs: await cg.procs() },
        'a sandbox cgroup could not be removed',
      );
    }
  }

  /** Remove every cgroup of this daemon's whose sandbox is not in `keep` (start-up sweep). */
  async sweep(keep: ReadonlySet<string>): Promise<string[]> {
    const e = await this.enforcement();
    if (e.version === null) return [];
    const names = await new Cgroup(e.layout, [this.parent]).children();
    const stale = names.filter((n) => !keep.has(n));
    for (const n of stale) await this.remove(n);
    return stale;
  }

  /** Remove the daemon's parent cgroup when no sandbox cgroup is left in it. */
  async close(): Promise<void> {
    const e = await this.enforcement();
    if (e.version !== null) await new Cgroup(e.layout, [this.parent]).remove(0).catch(() => false);
  }

  /** The directories of a sandbox's cgroup (tests, doctor). */
  async dirsOf(id: string): Promise<string[]> {
    return [...new Set(Object.values((await this.cgroup(id))?.dirs() ?? {}))];
  }
}
