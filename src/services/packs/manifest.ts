/**
 * The pack manifest (`forkd-pack.json`, the first member of a pack and the config blob of a
 * pushed snapshot): its own format version, every file with its size and sha256, the chain
 * of snapshots from the root to the top, the image they boot on, and what a host needs to
 * restore them. Everything here is checked before a byte is installed (docs/packs.md).
 */
import { readFile } from 'node:fs/promises';
import { ForkdError } from '../../errors.js';
import { SNAPSHOT_FORMAT_VERSION, type SnapshotManifest } from '../snapshots/files.js';

/** Bumped only when an older forkd could not read a new pack; independent of snapshot formats. */
export const PACK_FORMAT_VERSION = 1;
/**
 * A pushed snapshot whose files are chunks (chunks.ts): an older forkd, which reads only 1,
 * refuses it by this number instead of misreading its layers. Pack files stay 1.
 */
export const CHUNKED_FORMAT_VERSION = 2;
export const PACK_MANIFEST = 'forkd-pack.json';

/** The OCI types of a pushed snapshot (an artifact: no image config, no tar layers). */
export const PACK_MEDIA = {
  artifact: 'application/vnd.forkd.snapshot.v1',
  config: 'application/vnd.forkd.pack.config.v1+json',
  file: 'application/vnd.forkd.pack.file.v1.tar+zstd',
  /** Format 2: the chunk index of one file (JSON), and one chunk (gzip of its bytes). */
  index: 'application/vnd.forkd.pack.index.v1+json',
  chunk: 'application/vnd.forkd.pack.chunk.v1+gzip',
} as const;

/** One file of a pack, at its path inside the pack (`snapshots/TAG/NAME`, `images/NAME/…`). */
export interface PackFile {
  path: string;
  size: number;
  /** Bytes the sparse file took on the host that packed it. */
  allocated: number;
  sha256: string;
}

/** What the host needs to restore the pack's snapshots. */
export interface HostRequirements {
  /** QEMU's version: device state is only read back by the same major.minor. */
  qemu: string;
  machine: 'microvm';
  accel: 'kvm' | 'tcg';
  /** `max` under TCG (emulated: any host), `host` under KVM (the packing host's CPU). */
  cpu_model: 'max' | 'host';
  /** Under KVM: the packing host's CPU flags, which the restoring host must all have. */
  cpu_flags?: string[];
  /** The guest kernel running inside the snapshot (it is in the memory: informative). */
  kernel: string;
}

export interface PackManifest {
  format: 'forkd-pack';
  format_version: number;
  /** The snapshot the pack is of; `chain` ends with it. */
  tag: string;
  /** Snapshot tags from the root (no parent) to `tag`. */
  chain: string[];
  image: { name: string; included: boolean } | null;
  files: PackFile[];
  host: HostRequirements;
  /** When the top snapshot was made (not the pack: packing the same snapshot twice matches). */
  created_at: string;
  /** Format 2 (pushed as chunks): the bytes per chunk. */
  chunk_size?: number;
}

/** A snapshot's identity across hosts: its captured device state and its memory. */
export function snapshotIdentity(m: SnapshotManifest): string {
  return `${m.files.vmstate.sha256}/${m.memory_id ?? m.files.memory.sha256}`;
}

export const snapshotPath = (tag: string, name: string) => `snapshots/${tag}/${name}`;
export const imagePath = (name: string, file: string) => `images/${name}/${file}`;

/** This host's requirements for what it packs (and what it offers, for checkHost). */
export async function hostRequirements(
  m: Pick<SnapshotManifest, 'qemu' | 'accel' | 'kernel'>,
): Promise<HostRequirements> {
  const req: HostRequirements = {
    qemu: m.qemu,
    machine: 'microvm',
    accel: m.accel,
    cpu_model: m.accel === 'kvm' ? 'host' : 'max',
    kernel: m.kernel,
  };
  if (m.accel === 'kvm') req.cpu_flags = await cpuFlags();
  return req;
}

async function cpuFlags(): Promise<string[]> {
  const info = await readFile('/proc/cpuinfo', 'utf8').catch(() => '');
  const line = /^flags\s*:(.*)$/m.exec(info)?.[1] ?? '';
  return line.trim().split(/\s+/).filter(Boolean).sort();
}

const majorMinor = (v: string) => v.split('.').slice(0, 2).join('.');

/** Why this host cannot restore a pack made for `need`, or null when it can. */
export async function hostProblem(
  need: HostRequirements,
  here: { qemu: string; accel: 'kvm' | 'tcg' },
): Promise<string | null> {
  if (need.machine !== 'microvm') return `it needs QEMU machine type ${need.machine}`;
  if (need.accel !== here.accel) {
    return `it was captured under ${need.accel.toUpperCase()} and this host runs ${here.accel.toUpperCase()}: CPU state does not carry across accelerators`;
  }
  if (majorMinor(need.qemu) !== majorMinor(here.qemu)) {
    return `it was captured by QEMU ${need.qemu} and this host has QEMU ${here.qemu}: install QEMU ${majorMinor(need.qemu)}.x or recreate the snapshot here`;
  }
  if (need.accel === 'kvm') {
    const have = new Set(await cpuFlags());
    const lacking = (need.cpu_flags ?? []).filter((f) => !have.has(f));
    if (lacking.length > 0) {
      return `its CPU (-cpu host) had features this host's CPU lacks: ${lacking.slice(0, 8).join(' ')}${lacking.length > 8 ? ' …' : ''}`;
    }
  }
  return null;
}

/** A pack or pushed artifact forkd cannot read (`pack_invalid`), naming what is wrong. */
export function packInvalid(what: string, details: Record<string, unknown> = {}): ForkdError {
  return new ForkdError('pack_invalid', `${what}: nothing was installed`, details);
}

/**
 * Check a parsed manifest's shape and versions: `pack_invalid` for another format, a newer
 * version, a chain that does not end at its tag, or a file path outside the layout.
 */
export function checkPackManifest(
  value: unknown,
  readable: number[] = [PACK_FORMAT_VERSION],
): PackManifest {
  const m = value as Partial<PackManifest>;
  if (m?.format !== 'forkd-pack' || typeof m.format_version !== 'number') {
    throw packInvalid('this is not a forkd pack (no forkd-pack.json manifest)');
  }
  if (!readable.includes(m.format_version)) {
    const by = m.format_version > Math.max(...readable) ? 'a newer' : 'an older';
    throw packInvalid(
      `pack format ${m.format_version} is not ${readable.join(' or ')} (written by ${by} forkd): pack it again with this forkd (docs/COMPATIBILITY.md)`,
      { format_version: m.format_version },
    );
  }
  const chunked = m.format_version === CHUNKED_FORMAT_VERSION;
  if (chunked && !(Number.isInteger(m.chunk_size) && (m.chunk_size as number) > 0)) {
    throw packInvalid('the pack manifest of a chunked snapshot has no chunk size');
  }
  if (!Array.isArray(m.chain) || m.chain.at(-1) !== m.tag || !Array.isArray(m.files) || !m.host) {
    throw packInvalid('the pack manifest is incomplete (chain, files or host requirements)');
  }
  for (const f of m.files) {
    if (
      !/^(snapshots|images)\/[A-Za-z0-9][\w.-]*\/[\w.-]+$/.test(f.path) ||
      f.path.includes('..')
    ) {
      throw packInvalid(`the pack names a file outside its layout: ${JSON.stringify(f.path)}`);
    }
  }
  return m as PackManifest;
}

/** Each snapshot manifest of a pack must be one this forkd restores and chain as listed. */
export function checkChain(pack: PackManifest, manifests: Map<string, SnapshotManifest>): void {
  let below: string | null = null;
  for (const tag of pack.chain) {
    const m = manifests.get(tag);
    if (!m) {
      throw packInvalid(
        `the pack lacks snapshot "${tag}" of its chain (its parent layer is missing)`,
        {
          tag,
        },
      );
    }
    if (m.format_version > SNAPSHOT_FORMAT_VERSION || m.format_version < 1) {
      throw packInvalid(
        `snapshot "${tag}" has format ${m.format_version}, which this forkd cannot restore (it reads 1–${SNAPSHOT_FORMAT_VERSION})`,
        { tag, format_version: m.format_version },
      );
    }
    if (m.parent !== below) {
      throw packInvalid(
        `snapshot "${tag}" layers on "${m.parent}", not on "${below}" as the chain says`,
      );
    }
    below = tag;
  }
}
