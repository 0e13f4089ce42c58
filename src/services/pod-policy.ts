/**
 * Which snapshots a pod may name (issue 30: annotations are policy, not trust). A pod's
 * `forkd.dev/snapshot` annotation is written by whoever writes the pod; the node's daemon
 * decides what it may fork. A sandbox made for containerd (labelled with its namespace by
 * the shim) may fork only a snapshot on the allow-list of `forkd daemon --pod-snapshots`
 * (`FORKD_POD_SNAPSHOTS`): tags (`warm`), tag patterns (`agent-*`) and registry prefixes
 * (`registry.example/team/`, for OCI references once they are pulled on first fork).
 * Without a list, pods may name no snapshot. Everything else is unaffected.
 */
import { ForkdError } from '../errors.js';

/** The label the shim puts on every sandbox it makes for containerd. */
export const CONTAINERD_LABEL = 'containerd.io/namespace';

/** `*` matches any run of characters in a tag; nothing else is special. */
function matches(pattern: string, ref: string): boolean {
  if (pattern.endsWith('/')) return ref.startsWith(pattern);
  if (!pattern.includes('*')) return pattern === ref;
  const re = pattern.split('*').map((p) => p.replace(/[.+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(`^${re.join('.*')}$`).test(ref);
}

export class PodPolicy {
  private constructor(readonly allowed: readonly string[]) {}

  /** The list as typed: comma- or space-separated entries; empty or absent: none. */
  static parse(list: string | undefined): PodPolicy {
    return new PodPolicy((list ?? '').split(/[\s,]+/).filter(Boolean));
  }

  allows(ref: string): boolean {
    return this.allowed.some((p) => matches(p, ref));
  }

  /** Refuse a fork of `snapshot` for a containerd sandbox the list does not allow. */
  check(snapshot: string, labels: Record<string, string> | undefined): void {
    if (!labels?.[CONTAINERD_LABEL] || this.allows(snapshot)) return;
    const allowed = this.allowed.length ? this.allowed.join(', ') : 'none';
    throw new ForkdError(
      'snapshot_not_allowed',
      `pods on this node may not fork snapshot "${snapshot}" (allowed: ${allowed}): ` +
        `name an allowed one, or add it to the node's \`forkd daemon --pod-snapshots\``,
      { snapshot, allowed: [...this.allowed] },
    );
  }
}
