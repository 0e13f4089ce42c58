/**
 * Hibernation (docs/idle.md, tier `hibernated`): a sandbox is captured to disk with the
 * capture behind `snapshot create` and `branch` (memory and device state; its disk layers
 * stay where they are, flushed by the stop), then its QEMU ends; a wake restores it under
 * the same id from those files. The capture is the sandbox's own, in `hibernated/` of its
 * directory, never a snapshot: it goes with the sandbox. Its memory file stays after the
 * wake, since the restored QEMU maps it as its RAM base (and a later capture copies it).
 * What the network needs again (NIC, policy, published ports) is written beside it, so a
 * wake after a daemon restart finds it too.
 */
import { existsSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { AgentClient } from '../../drivers/agent/client.js';
import type { Egress } from '../network/policy.js';
import type { PublishedPort } from '../network/ports.js';
import { memPathOf, sandboxVmSpec } from './sandbox.js';
import type { VmHandle, VmNet } from '../../drivers/vmm.js';
import { vmm } from '../vmm.js';

/** What a wake needs besides the memory and device state, as written beside them. */
export interface HibernationImage {
  /** The disk layer its QEMU wrote to (the chain under it is in the layers' headers). */
  disk: string;
  /** Whether it has a NIC, and slirp's `restrict` (rootless hosts). */
  nic: boolean;
  restrict?: boolean;
  /** Its VM's device set (VmSpec.deviceSet); absent: 1, hibernated before 12-04. */
  device_set?: number;
  /** Its egress policy and published ports, put back on the wake. */
  egress?: Egress;
  ports: PublishedPort[];
  hibernated_at: string;
  /** Bytes of guest memory written to disk, how long its QEMU was stopped before it ended. */
  memory_bytes: number;
  pause_ms: number;
}

/** The network part of an image, from the network service. */
export type NetImage = Pick<HibernationImage, 'egress' | 'ports'>;
/** The network a sandbox kept on disk (hibernated or halted) gets back on its wake. */
export type DiskNet = Pick<HibernationImage, 'egress' | 'ports' | 'nic' | 'restrict'>;
/** How a wake from disk starts its QEMU on `net`, calling `onSpawn` with its pid. */
export type StartOnDisk = (
  net: VmNet | undefined,
  onSpawn: (pid: number) => Promise<void>,
) => Promise<{ vm: VmHandle; agent: AgentClient }>;

/** The file in a sandbox's directory that records its halt (halt.ts). */
export const HALT_FILE = 'halted.json';

/** The files of a sandbox's hibernation, inside its directory. */
export function hibernationFiles(dir: string) {
  const d = join(dir, 'hibernated');
  return {
    dir: d,
    memory: join(d, 'memory'),
    vmstate: join(d, 'vmstate'),
    image: join(d, 'image.json'),
  };
}

/**
 * A sandbox's RAM base: its hibernation's memory once it has been hibernated (the restored
 * QEMU maps it), else /dev/zero once it was halted (booted cold since: halt.ts), else its
 * snapshot's memory, or /dev/zero.
 */
export function ramBaseOf(p: Paths, row: { dir: string; snapshot: string | null }): string {
  const memory = hibernationFiles(row.dir).memory;
  if (existsSync(memory)) return memory;
  return existsSync(join(row.dir, HALT_FILE)) ? '/dev/zero' : memPathOf(p, row.snapshot);
}

/** A capture that is done but not yet in place: its QEMU is stopped and may end. */
export interface StagedCapture {
  image: HibernationImage;
  commit(): Promise<void>;
  discard(): Promise<void>;
}

/** The staging names of a hibernation's files, image last (its presence means complete). */
function stagedFiles(dir: string): { file: string; staged: string }[] {
  const f = hibernationFiles(dir);
  return [f.memory, f.vmstate, f.image].map((file) => ({ file, staged: `${file}.new` }));
}

/**
 * Put a complete staged capture in place, also one a crashed daemon left half renamed:
 * the staged image is written last and renamed last, so while it is there the other staged
 * files still there are the same capture's. Nothing staged: nothing to do.
 */
export async function commitStaged(dir: string): Promise<void> {
  const files = stagedFiles(dir);
  if (!existsSync(files[files.length - 1]!.staged)) return;
  for (const { file, staged } of files) if (existsSync(staged)) await rename(staged, file);
}

/** Remove what a capture that did not finish staged (it never became the sandbox's tier). */
export async function discardStaged(dir: string): Promise<void> {
  await Promise.all(stagedFiles(dir).map(({ staged }) => rm(staged, { force: true })));
}

/**
 * Capture a VM (running or paused) into staging files next to its hibernation, its image
 * last, and leave it stopped. The caller records the tier, ends its QEMU, then commits (the
 * files take their names: the old memory may still be the ended QEMU's RAM base until
 * then), or discards and resumes it. A daemon that dies after the record finds the staged
 * capture and commits it on its next start (reconcile.ts).
 */
export async function captureToDisk(vm: VmHandle, net: NetImage): Promise<StagedCapture> {
  const f = hibernationFiles(vm.spec.dir);
  await mkdir(f.dir, { recursive: true, mode: 0o700 });
  const staged = { memory: `${f.memory}.new`, deviceState: `${f.vmstate}.new` };
  const discard = () => discardStaged(vm.spec.dir);
  try {
    const disk = (await vmm().disks.top(vm)).file;
    const capture = await vmm().capture(vm, staged, { resume: false });
    const pages = await capture.pages;
    const image: HibernationImage = {
      disk,
      nic: vm.spec.net !== undefined,
      ...(vm.spec.net?.restrict ? { restrict: true } : {}),
      device_set: vm.spec.deviceSet ?? 1,
      ...net,
      hibernated_at: new Date().toISOString(),
      memory_bytes: pages.bytes,
      pause_ms: capture.pauseMs,
    };
    await writeFile(`${f.image}.new`, JSON.stringify(image, null, 2));
    return { image, commit: () => commitStaged(vm.spec.dir), discard };
  } catch (e) {
    await discard();
    throw e;
  }
}

/** The image a hibernated sandbox was written with. */
export async function readImage(dir: string): Promise<HibernationImage> {
  return JSON.parse(await readFile(hibernationFiles(dir).image, 'utf8')) as HibernationImage;
}

/** What a restore needs to know of the sandbox. */
export interface RestoreTarget {
  dir: string;
  memoryMiB: number;
  cpus: number;
  net: VmNet | undefined;
  /** Right after the spawn (its cgroup). */
  onSpawn?: (pid: number) => Promise<void>;
  agentTimeoutMs: number;
}

/**
 * A new QEMU from a sandbox's hibernation, on the disk layer it wrote to, running, its
 * agent reconnected (a new session) and the guest's wall clock pushed (it stood still). On
 * failure the new QEMU ends; the files stay, so the sandbox is still hibernated.
 */
export async function restoreFromDisk(
  image: HibernationImage,
  t: RestoreTarget,
): Promise<{ vm: VmHandle; agent: AgentClient }> {
  const { accel } = await vmm().accel();
  const f = hibernationFiles(t.dir);
  const spec = {
    ...sandboxVmSpec(
      t.dir,
      { memoryMiB: t.memoryMiB, cpus: t.cpus, accel },
      f.memory,
      image.device_set ?? 1,
    ),
    disk: image.disk,
    net: t.net,
    incoming: true,
  };
  const state = await open(f.vmstate, 'r');
  let vm: VmHandle;
  try {
    vm = await vmm().start(spec, { incomingFd: state.fd, onSpawn: t.onSpawn });
  } finally {
    await state.close(); // QEMU holds its own copy of the fd
  }
  try {
    await vm.restore();
    const agent = await vm.guard(
      AgentClient.connect(vm.files.agent, { timeoutMs: t.agentTimeoutMs }),
      'reconnecting to the guest agent',
    );
    await agent.configure({ timeMs: Date.now() }).catch((e: unknown) => {
      agent.close();
      throw e;
    });
    return { vm, agent };
  } catch (e) {
    await vm.kill();
    throw e;
  }
}
