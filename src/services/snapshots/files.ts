/**
 * A snapshot on disk: `snapshots/<tag>/` holds `memory` (the RAM file children map
 * copy-on-write), `vmstate` (device state, no RAM), `disk.qcow2` (the frozen disk layer) and
 * `manifest.json` (format version, sizes and sha256 of each file, what it was made from).
 * Written under a staging name and renamed into place, so a crash never leaves half a
 * snapshot under a real tag; `verify` re-checks every checksum.
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { readFile, rename, rm, stat, writeFile, mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { checkName } from '../checks.js';
import type { Egress } from '../network/policy.js';
import type { NetworkMode } from '../network/service.js';
import type { Limits } from '../limits.js';
import type { BootKey } from './boot.js';

/**
 * Bumped only when an older forkd could not restore the new layout: 2 is a snapshot whose
 * memory is a diff over its parent's (`memory.diff`, memory.ts). A snapshot with a full
 * memory is still written as 1, so older forkd versions keep reading it. 3 is a snapshot of
 * device set 2 or later (`device_set`): an older forkd would restore it into a VM whose
 * virtio transports sit elsewhere, which QEMU refuses.
 */
export const SNAPSHOT_FORMAT_VERSION = 3;
/** The oldest format this forkd restores. */
const OLDEST_FORMAT_VERSION = 1;

export const SNAPSHOT_FILES = { memory: 'memory', vmstate: 'vmstate', disk: 'disk.qcow2' } as const;
export type SnapshotFileRole = keyof typeof SNAPSHOT_FILES;

export interface FileEntry {
  name: string;
  /** Logical size (bytes). */
  size: number;
  /** Bytes actually allocated on disk (sparse files are smaller). */
  allocated: number;
  sha256: string;
}

export interface SnapshotManifest {
  format_version: number;
  tag: string;
  image: string | null;
  parent: string | null;
  /** The sandbox whose state it captured. */
  source_sandbox: string | null;
  kernel: string;
  qemu: string;
  /** CPU state from TCG (-cpu max) cannot be restored under KVM (-cpu host), nor back. */
  accel: 'kvm' | 'tcg';
  memory_mib: number;
  cpus: number;
  created_at: string;
  labels: Record<string, string>;
  files: Record<SnapshotFileRole, FileEntry>;
  /** The identity of its memory's content (absent: the sha256 of its full memory file). */
  memory_id?: string;
  /** Set when its memory is a diff (files.memory is `memory.diff`): the memory it is over. */
  memory_diff?: { parent: string; parent_memory_id: string };
  /** Its VM's device set (VmSpec.deviceSet; forks must match); absent: 1, from before 12-04. */
  device_set?: number;
  /** Whether its VM has a NIC (forks must match: the NIC is in the device state); absent: none. */
  network?: NetworkMode;
  /** The egress policy its forks inherit. */
  egress?: Egress;
  /** The resource limits of the sandbox it captured, which its children inherit (docs/limits.md). */
  limits?: Limits;
  /** Commands every child runs right after its restore (`snapshot create --on-fork`). */
  on_fork?: string[];
  /** Set on a boot snapshot (boot.ts): what it is valid for; hidden from `forkd snapshots`. */
  boot?: BootKey;
  /** Its children's commands and files default to this user (`--user`, else the image's User). */
  user?: string;
  /** Its children's commands start here by default (`--workdir`, else the image's WorkingDir). */
  workdir?: string;
  /** A build's config (`forkd build`): its forks' commands run with it (docs/build.md). */
  config?: SnapshotConfig;
}

/** What `forkd build` records of a Dockerfile's ENV, WORKDIR, USER, ENTRYPOINT, CMD, EXPOSE. */
export interface SnapshotConfig {
  env: Record<string, string>;
  working_dir?: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
  ports: number[];
}

/** Tags follow the name rule (src/contract/rules.ts). */
export function validateTag(tag: string): void {
  checkName('snapshot tag', tag);
}

export function snapshotDir(p: Paths, tag: string): string {
  return join(p.snapshots, tag);
}

/** A fresh staging dir for a snapshot being written (never listed). */
export async function stagingDir(p: Paths, tag: string): Promise<string> {
  const dir = join(p.snapshots, `.staging-${tag}-${process.pid}-${Date.now().toString(36)}`);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  return dir;
}

/** Remove staging dirs left by crashed writers (called when the daemon starts). */
export async function sweepStaging(p: Paths): Promise<string[]> {
  const names = await readdir(p.snapshots).catch(() => [] as string[]);
  const stale = names.filter((n) => n.startsWith('.staging-'));
  for (const n of stale) await rm(join(p.snapshots, n), { recursive: true, force: true });
  return stale;
}

export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 4 << 20 }))
    hash.update(chunk as Buffer);
  return hash.digest('hex');
}

export async function describeFile(
  dir: string,
  name: string,
  hash: (path: string) => Promise<string> = sha256File,
): Promise<FileEntry> {
  const st = await stat(join(dir, name));
  return { name, size: st.size, allocated: st.blocks * 512, sha256: await hash(join(dir, name)) };
}

/** Digests of write-once files, with the identity on disk they were computed for. */
const stableDigests = new Map<string, { identity: string; sha256: string }>();

/**
 * sha256File for a file that is written once and only read after (an image's rootfs):
 * every pack, push and unpack of a chain needs its digest, and hashing a whole rootfs each
 * time was most of their time. Hashed again whenever its inode, size, mtime or ctime
 * differ from when it was hashed (any write moves ctime). Snapshot files are not cached:
 * `verify` and a pack's own check are there to catch a snapshot damaged on disk.
 */
export async function sha256StableFile(path: string): Promise<string> {
  const st = await stat(path, { bigint: true });
  const identity = `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  const known = stableDigests.get(path);
  if (known?.identity === identity) return known.sha256;
  // The identity read before hashing: a write during the hash moves ctime past it.
  const sha256 = await sha256File(path);
  stableDigests.set(path, { identity, sha256 });
  return sha256;
}

/** The oldest format that says what a snapshot needs: its device set, a diff memory. */
export function formatOf(m: Pick<SnapshotManifest, 'device_set' | 'memory_diff'>): number {
  if ((m.device_set ?? 1) >= 2) return 3;
  return m.memory_diff ? 2 : OLDEST_FORMAT_VERSION;
}

/** Checksum the files of a staged snapshot, write its manifest, rename it into place. */
export async function publishSnapshot(
  p: Paths,
  staging: string,
  meta: Omit<SnapshotManifest, 'files' | 'format_version'>,
): Promise<SnapshotManifest> {
  const files = {} as Record<SnapshotFileRole, FileEntry>;
  for (const role of Object.keys(SNAPSHOT_FILES) as SnapshotFileRole[]) {
    const name = role === 'memory' && meta.memory_diff ? 'memory.diff' : SNAPSHOT_FILES[role];
    files[role] = await describeFile(staging, name);
  }
  const format_version = formatOf(meta);
  // A compact passes the manifest it flattens: its format and files are this one's own.
  const manifest: SnapshotManifest = { ...meta, format_version, files };
  await writeFile(join(staging, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
  const dest = snapshotDir(p, meta.tag);
  if (existsSync(dest)) {
    throw new ForkdError('name_taken', `snapshot "${meta.tag}" already exists`, { tag: meta.tag });
  }
  await rename(staging, dest);
  return manifest;
}

export async function readManifest(p: Paths, tag: string): Promise<SnapshotManifest> {
  const text = await readFile(join(snapshotDir(p, tag), 'manifest.json'), 'utf8').catch(
    () => undefined,
  );
  if (text === undefined) {
    throw new ForkdError('snapshot_not_found', `no snapshot "${tag}": see \`forkd snapshots\``, {
      tag,
    });
  }
  return JSON.parse(text) as SnapshotManifest;
}

/** Why a snapshot cannot be restored (missing or resized files), or null when it can. */
export async function unbootableReason(p: Paths, m: SnapshotManifest): Promise<string | null> {
  const v = m.format_version;
  if (!(v >= OLDEST_FORMAT_VERSION && v <= SNAPSHOT_FORMAT_VERSION)) {
    const was = v < OLDEST_FORMAT_VERSION ? 'an older' : 'a newer';
    return `snapshot format ${v} is not ${OLDEST_FORMAT_VERSION}–${SNAPSHOT_FORMAT_VERSION} (written by ${was} forkd): recreate it with this forkd (docs/COMPATIBILITY.md)`;
  }
  const dir = snapshotDir(p, m.tag);
  for (const f of Object.values(m.files)) {
    const st = await stat(join(dir, f.name)).catch(() => undefined);
    if (!st) return `missing file ${join(dir, f.name)}`;
    if (st.size !== f.size)
      return `file ${join(dir, f.name)} is ${st.size} bytes, expected ${f.size}`;
  }
  return null;
}

/** Re-hash every file of one snapshot against its manifest; returns the files that differ. */
export async function verifyFiles(
  p: Paths,
  m: SnapshotManifest,
): Promise<{ file: string; problem: string }[]> {
  const dir = snapshotDir(p, m.tag);
  const bad: { file: string; problem: string }[] = [];
  for (const f of Object.values(m.files)) {
    const path = join(dir, f.name);
    if (!existsSync(path)) bad.push({ file: path, problem: 'missing' });
    else if ((await sha256File(path)) !== f.sha256)
      bad.push({ file: path, problem: 'sha256 differs' });
  }
  return bad;
}

/** Tags of every published snapshot on disk. */
export async function listTags(p: Paths): Promise<string[]> {
  const names = await readdir(p.snapshots).catch(() => [] as string[]);
  return names.filter((n) => !n.startsWith('.')).sort();
}
