/**
 * The cgroup filesystem, v2 (unified) and v1 (one hierarchy per controller): where this
 * process's cgroups are, a child cgroup per name under them, its limits, moving a process
 * in, its usage and OOM kills, its removal. Knows nothing of sandboxes: callers name the
 * cgroup by path segments. The path and value logic is pure (unit-tested for both
 * versions, whichever this host mounts); only the `Cgroup` methods and `detectCgroups`
 * touch the filesystem.
 *
 * New cgroups are made under the cgroup this process already runs in (per hierarchy on
 * v1), never at a hierarchy's root: a QEMU stays inside whatever accounting the daemon
 * itself is under (a systemd slice, a container's limit).
 */
import { mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export type CgroupVersion = 'v1' | 'v2';
/** The controllers a sandbox's limits need (v1 reads cpu usage from `cpuacct` when mounted apart). */
export type Controller = 'memory' | 'cpu' | 'pids';
export const CONTROLLERS: readonly Controller[] = ['memory', 'cpu', 'pids'];
type Hierarchy = Controller | 'cpuacct';
const V1_HIERARCHIES: readonly Hierarchy[] = [...CONTROLLERS, 'cpuacct'];

/** Limits as the kernel takes them; null = unlimited. */
export interface CgroupLimits {
  memoryBytes: number | null;
  /** A quota in cores: 0.5 = 50 ms of CPU time per 100 ms period. */
  cpuCores: number | null;
  pids: number | null;
}

/** What a cgroup has used. */
export interface CgroupUsage {
  cpuSeconds: number;
  memoryBytes: number;
  /** CPU time the quota held back (the cgroup wanted to run and was throttled). */
  throttledSeconds: number;
  /** Processes the kernel's OOM killer ended because the memory limit was reached. */
  oomKills: number;
}

/** Where this process's cgroups are: the directory of each hierarchy it can create under. */
export interface CgroupLayout {
  version: CgroupVersion;
  /** v2: the same directory for every controller. v1: one per hierarchy (`cpuacct` optional). */
  dirs: Partial<Record<Hierarchy, string>>;
}

/** A mounted hierarchy: where, and which part of the hierarchy the mount shows. */
interface Mount {
  point: string;
  root: string;
}

export interface Mounts {
  v2?: Mount;
  v1: Partial<Record<Hierarchy, Mount>>;
}

/** `/proc/PID/cgroup`: the path of the process in v2 and in each v1 hierarchy. */
export interface Membership {
  v2?: string;
  v1: Partial<Record<Hierarchy, string>>;
}

/** The cgroup mounts of `/proc/self/mountinfo` (v1 controllers from the super options). */
export function parseMountinfo(text: string): Mounts {
  const mounts: Mounts = { v1: {} };
  for (const line of text.split('\n')) {
    const [left, right] = line.split(' - ');
    if (!left || !right) continue;
    const f = left.split(' ');
    const [fstype, , superOpts = ''] = right.split(' ');
    const mount = { root: unescape(f[3] ?? '/'), point: unescape(f[4] ?? '') };
    if (fstype === 'cgroup2') mounts.v2 ??= mount;
    if (fstype !== 'cgroup') continue;
    for (const opt of superOpts.split(',')) {
      const h = V1_HIERARCHIES.find((c) => c === opt);
      if (h) mounts.v1[h] ??= mount;
    }
  }
  return mounts;
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** `/proc/PID/cgroup` lines `ID:controllers:path`; `0::path` is v2. */
export function parseProcCgroup(text: string): Membership {
  const m: Membership = { v1: {} };
  for (const line of text.split('\n')) {
    const match = /^(\d+):([^:]*):(.*)$/.exec(line.trim());
    if (!match) continue;
    const [, id, controllers = '', path = '/'] = match;
    if (id === '0' && controllers === '') m.v2 = path;
    for (const c of controllers.split(',')) {
      const h = V1_HIERARCHIES.find((x) => x === c);
      if (h) m.v1[h] = path;
    }
  }
  return m;
}

/** The directory of cgroup `path` in a mount that shows the hierarchy from `mount.root`. */
export function cgroupDir(mount: Mount, path: string): string | undefined {
  const root = mount.root === '/' ? '' : mount.root;
  if (root && path !== root && !path.startsWith(`${root}/`)) return undefined;
  return join(mount.point, path.slice(root.length)).replace(/(.)\/$/, '$1');
}

/**
 * The layout limits can be written in: v2 when the unified hierarchy offers memory, cpu and
 * pids to this process's cgroup (`v2Controllers`, its cgroup.controllers), else v1 when all
 * three are mounted, else why not.
 */
export function chooseLayout(
  mounts: Mounts,
  self: Membership,
  v2Controllers: readonly string[],
): CgroupLayout | { reason: string } {
  if (mounts.v2 && self.v2 !== undefined && CONTROLLERS.every((c) => v2Controllers.includes(c))) {
    const dir = cgroupDir(mounts.v2, self.v2);
    if (dir) return { version: 'v2', dirs: { memory: dir, cpu: dir, pids: dir } };
  }
  const dirs: CgroupLayout['dirs'] = {};
  for (const h of V1_HIERARCHIES) {
    const mount = mounts.v1[h];
    const path = self.v1[h];
    if (mount && path !== undefined) dirs[h] = cgroupDir(mount, path);
  }
  const missing = CONTROLLERS.filter((c) => !dirs[c]);
  if (missing.length === 0) return { version: 'v1', dirs };
  if (mounts.v2 && Object.keys(mounts.v1).length === 0) {
    const lacking = CONTROLLERS.filter((c) => !v2Controllers.includes(c));
    return { reason: `cgroup v2 does not offer ${lacking.join(', ')} to forkd's cgroup` };
  }
  return { reason: `no cgroup hierarchy for ${missing.join(', ')} is mounted` };
}

/** The CFS period every quota is expressed in (100 ms, the kernel's default). */
export const CPU_PERIOD_US = 100_000;

/**
 * The CPU weight that goes with a quota (the kernel's default without one): a sandbox held
 * to half a core also yields half as readily when others want the CPU, so a throttled
 * neighbour's bursts do not hold back a sibling's wake-ups (bench/limits.ts on a quiet host:
 * the victim's `exec true` p50 at 1.0–1.7× idle with it, 1.2–2.7× without; docs/limits.md).
 */
function cpuWeight(version: CgroupVersion, cores: number | null): string {
  const [unit, min, max] = version === 'v2' ? [100, 1, 10_000] : [1024, 2, 262_144];
  return String(Math.min(max, Math.max(min, Math.round(unit * (cores ?? 1)))));
}

/** The files and values that set `limits`, per hierarchy, in the order to write them. */
export function limitWrites(
  version: CgroupVersion,
  limits: CgroupLimits,
): { hierarchy: Controller; file: string; value: string }[] {
  const quota = limits.cpuCores === null ? null : Math.round(limits.cpuCores * CPU_PERIOD_US);
  if (version === 'v2') {
    return [
      { hierarchy: 'memory', file: 'memory.max', value: String(limits.memoryBytes ?? 'max') },
      { hierarchy: 'cpu', file: 'cpu.max', value: `${quota ?? 'max'} ${CPU_PERIOD_US}` },
      { hierarchy: 'cpu', file: 'cpu.weight', value: cpuWeight(version, limits.cpuCores) },
      { hierarchy: 'pids', file: 'pids.max', value: String(limits.pids ?? 'max') },
    ];
  }
  return [
    { hierarchy: 'memory', file: 'memory.limit_in_bytes', value: String(limits.memoryBytes ?? -1) },
    { hierarchy: 'cpu', file: 'cpu.cfs_period_us', value: String(CPU_PERIOD_US) },
    { hierarchy: 'cpu', file: 'cpu.cfs_quota_us', value: String(quota ?? -1) },
    { hierarchy: 'cpu', file: 'cpu.shares', value: cpuWeight(version, limits.cpuCores) },
    { hierarchy: 'pids', file: 'pids.max', value: String(limits.pids ?? 'max') },
  ];
}

/** The files usage is read from, per version (v1: cpuacct when mounted, else nothing for CPU). */
export function usageFiles(version: CgroupVersion) {
  return version === 'v2'
    ? {
        cpu: { hierarchy: 'cpu', file: 'cpu.stat' },
        memory: { hierarchy: 'memory', file: 'memory.current' },
        throttle: { hierarchy: 'cpu', file: 'cpu.stat' },
        oom: { hierarchy: 'memory', file: 'memory.events' },
      }
    : {
        cpu: { hierarchy: 'cpuacct', file: 'cpuacct.usage' },
        memory: { hierarchy: 'memory', file: 'memory.usage_in_bytes' },
        throttle: { hierarchy: 'cpu', file: 'cpu.stat' },
        oom: { hierarchy: 'memory', file: 'memory.oom_control' },
      };
}

/** The files of a cgroup's memory limit, usage and peak usage, per version. */
export function memoryFiles(version: CgroupVersion): {
  limit: string;
  usage: string;
  peak: string;
} {
  return version === 'v2'
    ? { limit: 'memory.max', usage: 'memory.current', peak: 'memory.peak' }
    : {
        limit: 'memory.limit_in_bytes',
        usage: 'memory.usage_in_bytes',
        peak: 'memory.max_usage_in_bytes',
      };
}

/**
 * A memory limit as the kernel shows it; null for none: v2 writes `max`, v1 a page-rounded
 * 2^63 - 1 (anything at or above 2^62 is taken as none).
 */
export function parseMemoryLimit(text: string): number | null {
  const t = text.trim();
  if (t === 'max' || t === '') return null;
  const n = Number(t);
  return Number.isFinite(n) && n < 2 ** 62 ? n : null;
}

/** A cgroup's memory: its limit (null: none), what it uses now, and the most it used. */
export interface CgroupMemory {
  limit: number | null;
  usage: number;
  /** Since it was made, or since {@link Cgroup.resetPeak}; null where the kernel keeps none. */
  peak: number | null;
}

/** A `key value` line of a flat-keyed file (cpu.stat, memory.events, memory.oom_control). */
export function keyed(text: string, key: string): number {
  const m = new RegExp(`^${key} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

/** The usage of a cgroup from the texts of its {@link usageFiles}. */
export function parseUsage(
  version: CgroupVersion,
  text: { cpu: string; memory: string; throttle: string; oom: string },
): CgroupUsage {
  const memoryBytes = Number(text.memory.trim()) || 0;
  const oomKills = keyed(text.oom, 'oom_kill');
  if (version === 'v2') {
    return {
      cpuSeconds: keyed(text.cpu, 'usage_usec') / 1e6,
      memoryBytes,
      throttledSeconds: keyed(text.throttle, 'throttled_usec') / 1e6,
      oomKills,
    };
  }
  return {
    cpuSeconds: (Number(text.cpu.trim()) || 0) / 1e9,
    memoryBytes,
    throttledSeconds: keyed(text.throttle, 'throttled_time') / 1e9,
    oomKills,
  };
}

/** Where this process's cgroups are on this host, or why limits cannot be written. */
export async function detectCgroups(): Promise<CgroupLayout | { reason: string }> {
  const read = (p: string) => readFile(p, 'utf8').catch(() => '');
  const mounts = parseMountinfo(await read('/proc/self/mountinfo'));
  const self = parseProcCgroup(await read('/proc/self/cgroup'));
  const v2Dir = mounts.v2 && self.v2 !== undefined ? cgroupDir(mounts.v2, self.v2) : undefined;
  const v2Controllers = v2Dir ? (await read(join(v2Dir, 'cgroup.controllers'))).split(/\s+/) : [];
  return chooseLayout(mounts, self, v2Controllers);
}

/**
 * v2's "no internal processes" rule: a cgroup other than the root cannot hand controllers
 * to children while it holds processes. A daemon in a delegated cgroup of its own (systemd
 * `Delegate=yes`) therefore moves itself into a leaf, `<its cgroup>/<leaf>`, as systemd's
 * delegation rules ask; then the layout's dir can hand controllers down. v1: nothing to do.
 */
export async function vacateForChildren(layout: CgroupLayout, leaf: string): Promise<void> {
  if (layout.version !== 'v2') return;
  const dir = layout.dirs.memory as string;
  await mkdir(join(dir, leaf), { recursive: true });
  await writeFile(join(dir, leaf, 'cgroup.procs'), String(process.pid));
}

/** One cgroup (in every hierarchy of the layout) named by path segments under the layout's dirs. */
export class Cgroup {
  constructor(
    readonly layout: CgroupLayout,
    readonly segments: readonly string[],
  ) {}

  /** Its directory in each hierarchy (v2: one). */
  dirs(): Partial<Record<Hierarchy, string>> {
    const out: Partial<Record<Hierarchy, string>> = {};
    for (const [h, base] of Object.entries(this.layout.dirs) as [Hierarchy, string][]) {
      out[h] = join(base, ...this.segments);
    }
    return out;
  }

  private unique(): string[] {
    return [...new Set(Object.values(this.dirs()))];
  }

  private dir(h: Hierarchy): string | undefined {
    return this.dirs()[h];
  }

  /**
   * Make it (and its parents). On v2 each level below the layout's dir must hand the
   * controllers down (`cgroup.subtree_control`); that fails on a cgroup that has processes
   * of its own (other than the root), which is why forkd never creates directly in one.
   */
  async create(): Promise<void> {
    for (const dir of this.unique()) await mkdir(dir, { recursive: true });
    if (this.layout.version !== 'v2') return;
    const base = this.layout.dirs.memory as string;
    const enable = CONTROLLERS.map((c) => `+${c}`).join(' ');
    let dir = base;
    for (const seg of this.segments) {
      await writeFile(join(dir, 'cgroup.subtree_control'), enable);
      dir = join(dir, seg);
    }
  }

  /** Write its limits (an existing cgroup's are replaced: a pooled QEMU's at hand-out). */
  async setLimits(limits: CgroupLimits): Promise<void> {
    for (const w of limitWrites(this.layout.version, limits)) {
      await writeFile(join(this.dir(w.hierarchy) as string, w.file), w.value);
    }
  }

  /** Move a process (all its threads) in; its children are born inside. */
  async join(pid: number): Promise<void> {
    for (const dir of this.unique()) await writeFile(join(dir, 'cgroup.procs'), String(pid));
  }

  /** The pids inside it (any hierarchy: a process joins all of them at once). */
  async procs(): Promise<number[]> {
    const dir = this.unique()[0];
    const text = dir ? await readFile(join(dir, 'cgroup.procs'), 'utf8').catch(() => '') : '';
    return text.split('\n').filter(Boolean).map(Number);
  }

  async usage(): Promise<CgroupUsage> {
    const files = usageFiles(this.layout.version);
    const read = async (f: { hierarchy: string; file: string }) => {
      const dir = this.dir(f.hierarchy as Hierarchy);
      return dir ? readFile(join(dir, f.file), 'utf8').catch(() => '') : '';
    };
    return parseUsage(this.layout.version, {
      cpu: await read(files.cpu),
      memory: await read(files.memory),
      throttle: await read(files.throttle),
      oom: await read(files.oom),
    });
  }

  /** Its memory limit, usage and peak (the layout's own dirs with no segments: the daemon's). */
  async memory(): Promise<CgroupMemory> {
    const files = memoryFiles(this.layout.version);
    const dir = this.dir('memory') as string;
    const read = (f: string) => readFile(join(dir, f), 'utf8').catch(() => '');
    const peak = (await read(files.peak)).trim();
    return {
      limit: parseMemoryLimit(await read(files.limit)),
      usage: Number((await read(files.usage)).trim()) || 0,
      peak: peak === '' ? null : Number(peak),
    };
  }

  /**
   * The least memory free under any limit from this cgroup up to its hierarchy's root:
   * what one more allocation inside it can get (Infinity: no limit anywhere above).
   */
  async memoryFree(): Promise<number> {
    const files = memoryFiles(this.layout.version);
    let free = Infinity;
    for (let dir = this.dir('memory') as string; dir !== dirname(dir); dir = dirname(dir)) {
      const limit = await readFile(join(dir, files.limit), 'utf8').catch(() => undefined);
      if (limit === undefined) continue; // not made yet, or above the hierarchy's root
      const bytes = parseMemoryLimit(limit);
      if (bytes === null) continue;
      const usage = Number(await readFile(join(dir, files.usage), 'utf8').catch(() => '0'));
      free = Math.min(free, Math.max(0, bytes - usage));
    }
    return free;
  }

  /** Set its memory limit alone (null: none). */
  async setMemoryLimit(bytes: number | null): Promise<void> {
    const [w] = limitWrites(this.layout.version, {
      memoryBytes: bytes,
      cpuCores: null,
      pids: null,
    });
    await writeFile(
      join(this.dir('memory') as string, memoryFiles(this.layout.version).limit),
      w?.value ?? '',
    );
  }

  /** Start its peak over (v1; v2's `memory.peak` resets only for the file handle written). */
  async resetPeak(): Promise<void> {
    const dir = this.dir('memory') as string;
    await writeFile(join(dir, memoryFiles(this.layout.version).peak), '0').catch(() => undefined);
  }

  /** True when its directory exists (in the memory hierarchy, which every layout has). */
  async exists(): Promise<boolean> {
    const dir = this.dir('memory');
    return (
      dir !== undefined &&
      (await readdir(dir).then(
        () => true,
        () => false,
      ))
    );
  }

  /**
   * Remove it. A process that was just killed leaves its cgroup a moment after it is
   * reaped, so EBUSY is retried for up to `waitMs`; a cgroup still holding processes then
   * stays (false), and the caller says so. Gone already counts as removed.
   */
  async remove(waitMs = 2000): Promise<boolean> {
    const deadline = Date.now() + waitMs;
    for (const dir of this.unique()) {
      for (;;) {
        const err = await rmdir(dir).then(
          () => undefined,
          (e: NodeJS.ErrnoException) => e,
        );
        if (!err || err.code === 'ENOENT') break;
        if (err.code !== 'EBUSY' || Date.now() > deadline) return false;
        await sleep(20);
      }
    }
    return true;
  }

  /** The names of its child cgroups, in any hierarchy (a half-made one counts too). */
  async children(): Promise<string[]> {
    const names = new Set<string>();
    for (const dir of this.unique()) {
      const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
      for (const e of entries) if (e.isDirectory()) names.add(e.name);
    }
    return [...names];
  }
}
