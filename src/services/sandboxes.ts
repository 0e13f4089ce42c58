/**
 * Sandboxes: a microVM booted from an image with its own disk overlay, reachable through
 * its agent. This module decides names, limits, directories and teardown; the QEMU and
 * agent drivers do the talking.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../config.js';
import { ForkdError } from '../errors.js';
import { AgentClient } from '../drivers/agent/client.js';
import { detectAccel, hostTscKhz } from '../drivers/qemu/accel.js';
import { createOverlay, Vm } from '../drivers/qemu/vm.js';
import { locateGuest } from './guest.js';
import { getImage } from './images.js';

/** What a caller asks for when booting a sandbox from an image. */
export interface BootRequest {
  image: string;
  memoryMiB?: number;
  cpus?: number;
  env?: Record<string, string>;
  /** How long to wait for the guest agent (TCG boots take ~2–3 s; default 60 s). */
  bootTimeoutMs?: number;
  /** Aborting stops the boot and removes everything made so far. */
  signal?: AbortSignal;
}

export const LIMITS = { memoryMiB: { min: 64, max: 65536 }, cpus: { min: 1, max: 64 } };
export const DEFAULTS = { memoryMiB: 256, cpus: 1 };

/** A running sandbox: its VM and a connected agent. */
export interface Sandbox {
  id: string;
  dir: string;
  vm: Vm;
  agent: AgentClient;
}

/** A new sandbox id: `sbx-` and 12 hex digits. */
export function newSandboxId(): string {
  return `sbx-${randomBytes(6).toString('hex')}`;
}

function checkRange(name: string, value: number, range: { min: number; max: number }): void {
  if (!Number.isInteger(value) || value < range.min || value > range.max) {
    throw new ForkdError(
      'bad_request',
      `${name} must be an integer from ${range.min} to ${range.max}`,
      {
        field: name,
        value,
      },
    );
  }
}

/**
 * Boot a sandbox from an image and wait until its agent answers; push identity and clock.
 * On any failure everything made so far (QEMU, sockets, overlay, directory) is removed.
 */
export async function bootSandbox(p: Paths, req: BootRequest): Promise<Sandbox> {
  const memoryMiB = req.memoryMiB ?? DEFAULTS.memoryMiB;
  const cpus = req.cpus ?? DEFAULTS.cpus;
  checkRange('memory_mib', memoryMiB, LIMITS.memoryMiB);
  checkRange('cpus', cpus, LIMITS.cpus);
  const image = await getImage(p, req.image);
  const guest = await locateGuest(p);
  const { accel } = await detectAccel();
  const id = newSandboxId();
  const dir = join(p.sandboxes, id);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  let vm: Vm | undefined;
  try {
    const disk = join(dir, 'overlay.qcow2');
    await createOverlay(disk, image.path, 'raw');
    vm = await Vm.start({
      dir,
      memoryMiB,
      cpus,
      accel,
      memPath: '/dev/zero',
      disk,
      boot: { kernel: guest.kernel, initramfs: guest.initramfs, tscKhz: await hostTscKhz() },
    });
    req.signal?.throwIfAborted();
    const agent = await vm.guard(
      AgentClient.connect(vm.files.agent, {
        timeoutMs: req.bootTimeoutMs ?? 60_000,
        signal: req.signal,
      }),
      'waiting for the guest agent',
    );
    await agent.configure({
      timeMs: Date.now(),
      entropy: randomBytes(64),
      hostname: id,
      env: { FORKD_SANDBOX_ID: id, ...req.env },
    });
    return { id, dir, vm, agent };
  } catch (e) {
    await vm?.kill();
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

/** End a sandbox: close the agent, end QEMU, remove its directory. */
export async function destroySandbox(sb: Sandbox): Promise<void> {
  sb.agent.close();
  await sb.vm.kill();
  await rm(sb.dir, { recursive: true, force: true });
}
