/**
 * Forking one child of a snapshot, in two halves so a pool can do the first ahead of time:
 * `prepareChild` makes its directory and disk overlay and starts a QEMU waiting in
 * `-incoming defer` with the snapshot's device state on fd 3 and its RAM mapped
 * copy-on-write over the snapshot's memory file; `restoreChild` loads the state and
 * connects the agent, pushing fresh time, entropy, id and hostname.
 */
import { mkdir, open, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { detectAccel } from '../../drivers/qemu/accel.js';
import { createOverlay, Vm } from '../../drivers/qemu/vm.js';
import { ForkdError } from '../../errors.js';
import {
  connectGuest,
  memPathOf,
  newSandboxId,
  OWNER_FILE,
  sandboxDir,
  sandboxVmSpec,
  type Sandbox,
} from '../sandboxes.js';
import { snapshotDir, SNAPSHOT_FILES, type SnapshotManifest } from './files.js';

/** A QEMU ready to become a child of a snapshot. */
export interface PreparedChild {
  id: string;
  dir: string;
  vm: Vm;
}

/** Start a child's QEMU, waiting for its state; removes everything again on failure. */
export async function prepareChild(
  p: Paths,
  m: SnapshotManifest,
  id: string = newSandboxId(),
): Promise<PreparedChild> {
  const { accel } = await detectAccel();
  if (accel !== m.accel) {
    throw new ForkdError(
      'snapshot_not_bootable',
      `snapshot "${m.tag}" was made under ${m.accel} and this host runs ${accel}: recreate it here`,
      { tag: m.tag },
    );
  }
  const dir = sandboxDir(p, id);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  try {
    await writeFile(join(dir, OWNER_FILE), `${process.pid}\n`);
    const spec = sandboxVmSpec(
      dir,
      { memoryMiB: m.memory_mib, cpus: m.cpus, accel },
      memPathOf(p, m.tag),
    );
    await createOverlay(spec.disk, join(snapshotDir(p, m.tag), SNAPSHOT_FILES.disk), 'qcow2');
    const state = await open(join(snapshotDir(p, m.tag), SNAPSHOT_FILES.vmstate), 'r');
    try {
      const vm = await Vm.start({ ...spec, incoming: true }, { incomingFd: state.fd });
      return { id, dir, vm };
    } finally {
      await state.close(); // QEMU holds its own copy of the fd
    }
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

/** Restore a prepared child and hand it over running, agent connected and configured. */
export async function restoreChild(
  child: PreparedChild,
  req: { env?: Record<string, string>; signal?: AbortSignal; bootTimeoutMs?: number },
): Promise<Sandbox> {
  try {
    req.signal?.throwIfAborted();
    await child.vm.restore();
    const agent = await connectGuest(child.vm, child.id, {
      env: req.env,
      signal: req.signal,
      bootTimeoutMs: req.bootTimeoutMs ?? 30_000,
    });
    return { id: child.id, dir: child.dir, vm: child.vm, agent };
  } catch (e) {
    await discardChild(child);
    throw e;
  }
}

/** End a prepared child that will not be used. */
export async function discardChild(child: PreparedChild): Promise<void> {
  await child.vm.kill();
  await rm(child.dir, { recursive: true, force: true });
}
