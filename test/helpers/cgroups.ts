/**
 * The cgroups a test home's sandboxes got (docs/limits.md): where they are, so a test can
 * read their limits and usage, prove none is left, and remove any a failed test left. A
 * home has two parents: its daemon's sandboxes', and that of the VMs `forkd run` boots
 * without a daemon.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Cgroup, detectCgroups } from '../../src/drivers/host/cgroup.js';
import { cgroupParentName, runCgroupParent } from '../../src/services/limits.js';

/** The parent cgroup of a home's sandboxes (or of its runs), undefined without cgroups. */
export async function homeCgroup(home: string, run = false): Promise<Cgroup | undefined> {
  const layout = await detectCgroups();
  if ('reason' in layout) return undefined;
  return new Cgroup(layout, [run ? runCgroupParent(home) : cgroupParentName(home)]);
}

/** The directories of a home's cgroups that exist: its parents and every sandbox's. */
export async function cgroupsLeft(home: string): Promise<string[]> {
  const left: string[] = [];
  for (const parent of [await homeCgroup(home), await homeCgroup(home, true)]) {
    if (!parent || !(await parent.exists())) continue;
    const children = await parent.children();
    left.push(
      ...Object.values(parent.dirs()),
      ...children.map((c) => `${parent.dirs().memory as string}/${c}`),
    );
  }
  return left;
}

/** Remove a home's cgroups (their QEMUs must be gone already). */
export async function removeCgroups(home: string): Promise<void> {
  for (const parent of [await homeCgroup(home), await homeCgroup(home, true)]) {
    if (!parent) continue;
    for (const c of await parent.children().catch(() => [])) {
      await new Cgroup(parent.layout, [...parent.segments, c]).remove().catch(() => false);
    }
    await parent.remove().catch(() => false);
  }
}

/** What the kernel holds for one cgroup: its limits (null: none) and its processes. */
export interface CgroupState {
  memoryBytes: number | null;
  cpu: number | null;
  pids: number | null;
  procs: number[];
}

/** The limits and processes of the child `name` of `parent`, read from v1 or v2 files. */
export async function cgroupState(parent: Cgroup, name: string): Promise<CgroupState> {
  const dirs = new Cgroup(parent.layout, [...parent.segments, name]).dirs();
  const read = async (h: 'memory' | 'cpu' | 'pids', file: string) =>
    (await readFile(join(dirs[h] as string, file), 'utf8')).trim();
  const procs = (await read('pids', 'cgroup.procs')).split('\n').filter(Boolean).map(Number);
  const pidsMax = await read('pids', 'pids.max');
  const pids = pidsMax === 'max' ? null : Number(pidsMax);
  if (parent.layout.version === 'v2') {
    const mem = await read('memory', 'memory.max');
    const [quota, period] = (await read('cpu', 'cpu.max')).split(' ');
    return {
      memoryBytes: mem === 'max' ? null : Number(mem),
      cpu: quota === 'max' ? null : Number(quota) / Number(period),
      pids,
      procs,
    };
  }
  const mem = Number(await read('memory', 'memory.limit_in_bytes'));
  const quota = Number(await read('cpu', 'cpu.cfs_quota_us'));
  const period = Number(await read('cpu', 'cpu.cfs_period_us'));
  return {
    memoryBytes: mem >= 2 ** 62 ? null : mem,
    cpu: quota < 0 ? null : quota / period,
    pids,
    procs,
  };
}
