/**
 * `forkd snapshots`: the daemon's snapshots as a table (tag, image, memory, disk, created,
 * children alive, labels) or `--json`; a snapshot that cannot be forked is named on stderr
 * with the reason. Also the formatting `forkd snapshot info` shares.
 */
import type { Command } from 'commander';
import { Snapshot, type SnapshotInfo } from '@forkd/sdk';
import { SNAPSHOT, SNAPSHOT_MEMORY, toWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, formatBytes, printJson, printTable } from './output.js';

export function register(cmd: Command): void {
  daemonOptions(cmd.option('--json', 'machine-readable output')).action(action(listSnapshots));
}

async function listSnapshots(flags: DaemonFlags): Promise<void> {
  const all = await Snapshot.list(clientConfig(flags));
  if (flags.json) return printJson(all.map(snapshotJson));
  if (all.length === 0) {
    process.stderr.write(
      'no snapshots: make one with `forkd snapshot create --image busybox --tag warm`\n',
    );
    return;
  }
  printTable(
    ['TAG', 'IMAGE', 'MEMORY', 'DISK', 'CREATED', 'CHILDREN', 'LABELS', 'ORIGIN'],
    all.map((s) => [
      s.tag,
      s.image ?? s.parent ?? '-',
      `${s.memoryMib}M`,
      formatBytes(s.physicalBytes),
      shortTime(s.createdAt),
      String(s.childrenAlive),
      formatLabels(s.labels),
      formatOrigin(s),
    ]),
  );
  for (const s of all.filter((s) => !usable(s))) {
    process.stderr.write(`forkd: snapshot ${s.tag} cannot be forked: ${whyUnusable(s)}\n`);
  }
}

/** A snapshot in the REST API's shape (what `--json` prints). */
export function snapshotJson(s: SnapshotInfo): Record<string, unknown> {
  const json = toWire(SNAPSHOT, s);
  if (s.memory) json.memory = toWire(SNAPSHOT_MEMORY, s.memory);
  return json;
}

/** Ready and bootable: forks of it can start. */
export function usable(s: SnapshotInfo): boolean {
  return s.state === 'ready' && s.bootable;
}

/** Why a snapshot cannot be forked, in a few words. */
export function whyUnusable(s: SnapshotInfo): string {
  const what = s.state === 'ready' ? 'not bootable' : s.state;
  return s.reason ? `${what}: ${s.reason}` : what;
}

/** Where it came from: `REF@sha256:abcdef012345`, the pack file, or `-` when made here. */
export function formatOrigin(s: SnapshotInfo): string {
  if (!s.origin) return '-';
  const digest = s.origin.digest
    ? `@${s.origin.digest.replace(/^(sha256:)?/, 'sha256:').slice(0, 19)}`
    : '';
  return `${s.origin.from}${digest}`;
}

/** `k=v,k2=v2`, or `-` without labels. */
export function formatLabels(labels: Record<string, string>): string {
  const pairs = Object.entries(labels).map(([k, v]) => `${k}=${v}`);
  return pairs.join(',') || '-';
}

/** `2025-01-02T03:04:05.678Z` → `2025-01-02 03:04`. */
export function shortTime(iso: string): string {
  return iso.slice(0, 16).replace('T', ' ');
}
