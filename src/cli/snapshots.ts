/**
 * `forkd snapshots`: the daemon's snapshots as a table (tag, state, image, memory, disk,
 * created, children alive, labels) or `--json`; a snapshot that cannot be forked (failed,
 * still being written, not bootable) is named on stderr with the reason and what to do.
 * The step snapshots of `forkd build` (its cache) are hidden unless `--all`. Also the
 * formatting `forkd snapshot info` shares.
 */
import type { Command } from 'commander';
import { Snapshot, type SnapshotInfo } from '@forkd/sdk';
import { poolToWire, SNAPSHOT, SNAPSHOT_MEMORY, toWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, formatBytes, printJson, printTable } from './output.js';

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .option('--json', 'machine-readable output')
      .option('-a, --all', "also the snapshots of build steps (`forkd build`'s cache)"),
  ).action(action(listSnapshots));
}

async function listSnapshots(flags: DaemonFlags & { all?: boolean }): Promise<void> {
  const listed = await Snapshot.list(clientConfig(flags));
  // A build's step snapshots are its cache, not something to fork: hidden unless --all.
  const all = flags.all ? listed : listed.filter((s) => s.labels['forkd.build'] !== 'step');
  if (flags.json) return printJson(all.map(snapshotJson));
  if (all.length === 0) {
    process.stderr.write(
      'no snapshots: make one with `forkd snapshot create --image busybox --tag warm`\n',
    );
    return;
  }
  printTable(
    ['TAG', 'STATE', 'IMAGE', 'MEMORY', 'DISK', 'CREATED', 'CHILDREN', 'LABELS', 'ORIGIN'],
    all.map((s) => [
      s.tag,
      stateWord(s),
      s.image ?? s.parent ?? '-',
      `${s.memoryMib}M`,
      // An unfinished snapshot has no files: `0 B` would read as an empty one.
      s.state === 'ready' ? formatBytes(s.physicalBytes) : '-',
      shortTime(s.createdAt),
      s.state === 'ready' ? String(s.childrenAlive) : '-',
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
  json.pool = poolToWire(s.pool);
  if (s.memory) json.memory = toWire(SNAPSHOT_MEMORY, s.memory);
  return json;
}

/** Ready and bootable: forks of it can start. */
export function usable(s: SnapshotInfo): boolean {
  return s.state === 'ready' && s.bootable;
}

/** `ready`, `writing`, `failed`, or `not bootable` (ready, but a file or layer is wrong). */
export function stateWord(s: SnapshotInfo): string {
  return s.state === 'ready' && !s.bootable ? 'not bootable' : s.state;
}

/** Why a snapshot cannot be forked, in a few words, and what to do about it. */
export function whyUnusable(s: SnapshotInfo): string {
  const why = `${stateWord(s)}${s.reason ? `: ${s.reason}` : ''}`;
  if (s.state === 'failed') return `${why}; remove it with \`forkd rmi ${s.tag}\``;
  if (s.state === 'writing')
    return `${why}; \`forkd snapshot info ${s.tag}\` shows when it is ready`;
  return why;
}

/**
 * `2 of 2 ready, pre-warmed, 34 MiB of host memory`: a pool's VMs and what they take, and
 * `, 1 held back by the pool budget` when other snapshots' pools took the room.
 */
export function formatPool(pool: SnapshotInfo['pool']): string {
  const kind = pool.prewarm ? ', pre-warmed' : '';
  const memory = pool.memoryBytes ? `, ${formatBytes(pool.memoryBytes)} of host memory` : '';
  const held = pool.held > 0 ? `, ${pool.held} held back by the pool budget` : '';
  return `${pool.ready} of ${pool.size} ready${kind}${memory}${held}`;
}

/** `3 of 8 VMs, 96 MiB of 384 MiB`: all pools against the host's pool budget. */
export function formatPoolBudget(budget: NonNullable<SnapshotInfo['pool']['budget']>): string {
  return (
    `${budget.usedVms} of ${budget.vms} VMs, ` +
    `${formatBytes(budget.usedMemoryBytes)} of ${formatBytes(budget.memoryBytes)}`
  );
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
