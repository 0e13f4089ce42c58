/**
 * Boot snapshots (docs/snapshots.md "Boot snapshots"): no cold boot on a user's path. The
 * first time an image is started at a size, it is booted once, its agent answers, and it is
 * captured as a hidden snapshot whose tag is a hash of everything that makes it valid (the
 * image's content identity, kernel, initramfs and agent, QEMU version and machine,
 * accelerator, guest RAM, vCPUs, NIC). Later starts fork from it. A key that differs in
 * any part names another tag, so a rebuilt image never gets its old boot snapshot.
 * Concurrent first uses wait on one capture (a lock file, so separate `forkd run`s too); a
 * capture that fails leaves nothing and the caller boots instead.
 */
import { createHash } from 'node:crypto';
import { open, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { failPoint } from '../../util/crash.js';
import { makeDir } from '../../util/make-dir.js';
import { pidAlive } from '../../util/pid.js';
import { locateGuest } from '../guest.js';
import { getImage, imageIdentity } from '../images/index.js';
import type { Limiter } from '../limits.js';
import type { NetworkManager } from '../network/service.js';
import { createSnapshot } from './create.js';
import type { SnapshotManifest } from './files.js';
import type { SnapshotRegistry } from './registry.js';
import { vmm } from '../vmm.js';

/** What makes a boot snapshot valid: every field must equal the start's for it to be used. */
export interface BootKey {
  image: string;
  /** The image's content identity: its image.json and its rootfs file's identity on disk. */
  image_id: string;
  kernel: string;
  /** The kernel, initramfs and agent files' identities. */
  guest_id: string;
  qemu: string;
  machine: string;
  accel: 'kvm' | 'tcg';
  memory_mib: number;
  cpus: number;
  network: 'none' | 'nat';
}

/** What a start from an image asks for. */
export interface BootStart {
  image: string;
  memoryMiB: number;
  cpus: number;
  network: 'none' | 'nat';
}

/** Boot snapshot tags: `boot-` and 16 hex digits of the key's hash. */
export const BOOT_TAG_PREFIX = 'boot-';
/** How long a start waits for another process's capture of the same key. */
const CAPTURE_WAIT_MS = 300_000;
const LOCK_POLL_MS = 100;

/** A file's identity on disk: a rewrite (rename into place, or in place) changes it. */
async function fileIdentity(path: string): Promise<string> {
  const st = await stat(path, { bigint: true });
  return `${st.ino}:${st.size}:${st.mtimeNs}`;
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** The key of a start from an image on this host now (image_not_found, setup_required). */
export async function bootKey(p: Paths, start: BootStart, qemu: string): Promise<BootKey> {
  await getImage(p, start.image);
  const guest = await locateGuest(p);
  const guestIds = await Promise.all(
    [guest.kernel, guest.initramfs, guest.agent].map(fileIdentity),
  );
  return {
    image: start.image,
    image_id: await imageIdentity(p, start.image),
    kernel: guest.kernelVersion,
    guest_id: sha256(guestIds.join('\n')).slice(0, 32),
    qemu,
    // With its device set: boot snapshots captured under an older set are made again.
    machine: vmm().deviceSet > 1 ? `${vmm().machine}/${vmm().deviceSet}` : vmm().machine,
    accel: (await vmm().accel()).accel,
    memory_mib: start.memoryMiB,
    cpus: start.cpus,
    network: start.network,
  };
}

/** The tag of a key's boot snapshot. */
export function bootTag(key: BootKey): string {
  return BOOT_TAG_PREFIX + sha256(JSON.stringify(keyFields(key))).slice(0, 16);
}

/** The key's fields in one order, so the hash does not depend on how it was built. */
function keyFields(key: BootKey): (string | number)[] {
  const { image, image_id, kernel, guest_id, qemu, machine, accel } = key;
  return [
    image,
    image_id,
    kernel,
    guest_id,
    qemu,
    machine,
    accel,
    key.memory_mib,
    key.cpus,
    key.network,
  ];
}

/** Which field of a boot snapshot's key differs from `want` (null: none, it may be used). */
export function keyMismatch(have: BootKey | undefined, want: BootKey): string | null {
  if (!have) return 'it is no boot snapshot';
  const fields = Object.keys(want) as (keyof BootKey)[];
  return fields.find((f) => have[f] !== want[f]) ?? null;
}

/** Whether a manifest is a boot snapshot (hidden from `forkd snapshots`). */
export function isBoot(m: Pick<SnapshotManifest, 'boot'>): boolean {
  return m.boot !== undefined;
}

/** What capturing a boot snapshot needs. */
export interface BootContext {
  paths: Paths;
  registry: SnapshotRegistry;
  qemuVersion: string;
  /** The parent's NIC (a key with network `nat`). */
  network?: NetworkManager;
  limiter?: Limiter;
  /** Progress of a capture (booting, capturing, checksumming), e.g. for `image build`. */
  onProgress?: (message: string) => void;
}

/** The boot snapshot of a key, and whether this call captured it. */
export interface BootSnapshot {
  manifest: SnapshotManifest;
  captured: boolean;
  /** How long the capture took (0 when it existed). */
  captureMs: number;
}

/** Captures in progress in this process, by tag: later starts wait on the same one. */
const inFlight = new Map<string, Promise<BootSnapshot>>();

/**
 * The boot snapshot of `key`: the published one, or one captured now (once, however many
 * starts ask at the same time, in this process or others). Throws when it cannot be had.
 */
export function ensureBootSnapshot(ctx: BootContext, key: BootKey): Promise<BootSnapshot> {
  const tag = bootTag(key);
  const running = inFlight.get(tag);
  if (running) return running.then((b) => ({ ...b, captured: false, captureMs: 0 }));
  const made = (async () => {
    const found = await publishedBoot(ctx, key);
    if (found) return { manifest: found, captured: false, captureMs: 0 };
    return withCaptureLock(ctx.paths, tag, async () => {
      const now = await publishedBoot(ctx, key); // another process may have made it meanwhile
      if (now) return { manifest: now, captured: false, captureMs: 0 };
      const t0 = Date.now();
      const manifest = await captureBoot(ctx, key);
      return { manifest, captured: true, captureMs: Date.now() - t0 };
    });
  })();
  inFlight.set(tag, made);
  return made.finally(() => inFlight.delete(tag));
}

/** The published boot snapshot of a key, if there is one and it may be used. */
async function publishedBoot(ctx: BootContext, key: BootKey): Promise<SnapshotManifest | null> {
  const tag = bootTag(key);
  if (!ctx.registry.isPublished(tag)) return null;
  const m = await ctx.registry.bootable(tag);
  const differs = keyMismatch(m.boot, key);
  if (differs) {
    throw new ForkdError(
      'snapshot_not_bootable',
      `boot snapshot "${tag}" does not match this start (${differs} differs): remove it with \`forkd rmi ${tag}\``,
      { tag, reason: `${differs} differs` },
    );
  }
  return m;
}

/** Boot a parent of the key's image, capture it under the key's tag, publish it. */
async function captureBoot(ctx: BootContext, key: BootKey): Promise<SnapshotManifest> {
  const tag = bootTag(key);
  ctx.registry.reserve(tag, null);
  try {
    failPoint('boot:capture'); // tests: a capture that fails (the image must stay)
    const { manifest } = await createSnapshot(
      { tag, image: key.image, memory_mib: key.memory_mib, cpus: key.cpus, network: key.network },
      {
        paths: ctx.paths,
        network: key.network === 'nat' ? ctx.network : undefined,
        limiter: ctx.limiter,
        qemuVersion: ctx.qemuVersion,
        onProgress: ctx.onProgress ?? (() => undefined),
        boot: key,
      },
    );
    ctx.registry.markReady(tag, manifest);
    return manifest;
  } catch (e) {
    await ctx.registry.release(tag);
    throw e;
  }
}

/**
 * Run `fn` holding the capture lock of a tag: a file made with O_EXCL naming this process.
 * A lock whose process is gone is taken over; another's is waited for.
 */
async function withCaptureLock<T>(p: Paths, tag: string, fn: () => Promise<T>): Promise<T> {
  const lock = join(p.snapshots, `.${tag}.lock`);
  await makeDir(p.snapshots);
  const deadline = Date.now() + CAPTURE_WAIT_MS;
  for (;;) {
    const file = await open(lock, 'wx', 0o600).catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'EEXIST') return undefined;
      throw e;
    });
    if (file) {
      await file.writeFile(`${process.pid}\n`);
      await file.close();
      try {
        return await fn();
      } finally {
        await rm(lock, { force: true });
      }
    }
    const holder = Number((await readFile(lock, 'utf8').catch(() => '')).trim());
    if (holder > 0 && !pidAlive(holder)) await rm(lock, { force: true });
    else if (Date.now() > deadline) {
      throw new ForkdError(
        'timeout',
        `another process has been capturing boot snapshot ${tag} for too long`,
      );
    } else await new Promise((r) => setTimeout(r, LOCK_POLL_MS));
  }
}
