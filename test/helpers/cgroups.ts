/**
 * The cgroups a test home's sandboxes got (docs/limits.md): where they are, so a test can
 * read their limits and usage, prove none is left, and remove any a failed test left.
 */
import { Cgroup, detectCgroups } from '../../src/drivers/host/cgroup.js';
import { cgroupParentName } from '../../src/services/limits.js';

/** The parent cgroup of a home's sandboxes, or undefined when this host has no cgroups. */
export async function homeCgroup(home: string): Promise<Cgroup | undefined> {
  const layout = await detectCgroups();
  return 'reason' in layout ? undefined : new Cgroup(layout, [cgroupParentName(home)]);
}

/** The directories of a home's cgroups that exist: its parent and every sandbox's. */
export async function cgroupsLeft(home: string): Promise<string[]> {
  const parent = await homeCgroup(home);
  if (!parent || !(await parent.exists())) return [];
  const children = await parent.children();
  return [
    ...Object.values(parent.dirs()),
    ...children.map((c) => `${parent.dirs().memory as string}/${c}`),
  ];
}

/** Remove a home's cgroups (their QEMUs must be gone already). */
export async function removeCgroups(home: string): Promise<void> {
  const parent = await homeCgroup(home);
  if (!parent) return;
  for (const c of await parent.children()) {
    await new Cgroup(parent.layout, [...parent.segments, c]).remove().catch(() => false);
  }
  await parent.remove().catch(() => false);
}
