/**
 * Sandboxes: a microVM booted from an image with its own disk overlay, reachable through
 * its agent. This module decides names, limits, directories, boot and teardown; the QEMU
 * and agent drivers do the talking. `forkd run` uses it directly; the daemon's service
 * (src/services/sandboxes/) adds the store, timeouts, caps and crash recovery on top.
 */
import { randomBytes } from 'node:crypto';
import { totalmem } from 'node:os';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { DEFAULTS, LIMITS } from '../../contract/rules.js';
import { ForkdError } from '../../errors.js';
import { AgentClient } from '../../drivers/agent/client.js';
import { locateGuest } from '../guest.js';
import { checkRange } from '../checks.js';
import { getImage, imageEnv } from '../images/index.js';
import type { Limiter, Placement } from '../limits.js';
import { makeDir } from '../../util/make-dir.js';
import type { VmHandle, VmNet, VmSpec } from '../../drivers/vmm.js';
import { vmm } from '../vmm.js';
import { phase } from '../../util/phases.js';

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
  /** The id to use (the daemon records it before booting); default a new one. */
  id?: string;
  /** Called as soon as QEMU runs, before the guest answers (the daemon records the pid). */
  onStarted?(vm: VmHandle): void;
  /** The NIC (network `nat`); absent: no NIC. */
  net?: VmNet;
  /** Called right after QEMU is spawned, before it is waited for (its cgroup). */
  onSpawn?(pid: number): Promise<void>;
  /**
   * A VM that is no daemon sandbox (`forkd run`, `snapshot create`'s boot): its QEMU joins
   * a cgroup of its own with these limits, removed by {@link destroySandbox} or a failed boot.
   */
  placement?: Placement;
}

/** A running sandbox: its VM and a connected agent. */
export interface Sandbox {
  id: string;
  dir: string;
  vm: VmHandle;
  agent: AgentClient;
  /** Holds its cgroup when it was booted with a placement. */
  limiter?: Limiter;
}

/**
 * A file in every sandbox dir naming the process that booted it. The daemon's start-up
 * sweep leaves alone a dir with no database row whose owner still runs (a `forkd run`).
 */
export const OWNER_FILE = 'owner.pid';

/** A new sandbox id: `sbx-` and 12 hex digits. */
export function newSandboxId(): string {
  return `sbx-${randomBytes(6).toString('hex')}`;
}

/**
 * A guest larger than the host's RAM is refused before QEMU starts: QEMU would fail late
 * and obscurely (`ftruncate: Invalid argument`, `unable to map backing store`).
 */
function checkHostMemory(memoryMiB: number): void {
  const hostMiB = Math.floor(totalmem() / (1024 * 1024));
  if (memoryMiB <= hostMiB) return;
  throw new ForkdError(
    'bad_request',
    `memory_mib ${memoryMiB} is more than this host's ${hostMiB} MiB of RAM`,
    {
      field: 'memory_mib',
      value: memoryMiB,
      min: LIMITS.memoryMiB.min,
      max: hostMiB,
      limit: 'host',
    },
  );
}

/** Memory and CPUs of a request with defaults applied; `bad_request` when out of range. */
export function resolveResources(req: Pick<BootRequest, 'memoryMiB' | 'cpus'>): {
  memoryMiB: number;
  cpus: number;
} {
  const memoryMiB = req.memoryMiB ?? DEFAULTS.memoryMiB;
  const cpus = req.cpus ?? DEFAULTS.cpus;
  checkRange('memory_mib', memoryMiB, LIMITS.memoryMiB);
  checkRange('cpus', cpus, LIMITS.cpus);
  checkHostMemory(memoryMiB);
  return { memoryMiB, cpus };
}

/** Where a sandbox's files live. */
export function sandboxDir(p: Paths, id: string): string {
  return join(p.sandboxes, id);
}

/**
 * The VM spec of a sandbox (also rebuilt to adopt its QEMU later): RAM over /dev/zero when
 * booted from an image, over its snapshot's memory file when forked; the device set of VMs
 * made now unless it restores state captured with another (`deviceSet`).
 */
export function sandboxVmSpec(
  dir: string,
  res: { memoryMiB: number; cpus: number; accel: 'kvm' | 'tcg' },
  memPath = '/dev/zero',
  deviceSet = vmm().deviceSet,
): VmSpec {
  return { dir, ...res, memPath, disk: join(dir, 'overlay.qcow2'), deviceSet };
}

/** The RAM base file of a sandbox: its snapshot's memory, or /dev/zero. */
export function memPathOf(p: Paths, snapshot: string | null): string {
  return snapshot ? join(p.snapshots, snapshot, 'memory') : '/dev/zero';
}

/**
 * Boot a sandbox from an image and wait until its agent answers; push identity and clock.
 * On any failure everything made so far (QEMU, sockets, overlay, directory) is removed.
 */
export async function bootSandbox(p: Paths, req: BootRequest): Promise<Sandbox> {
  const res = resolveResources(req);
  const image = await getImage(p, req.image);
  const guest = await locateGuest(p);
  const { accel } = await vmm().accel();
  const id = req.id ?? newSandboxId();
  const dir = sandboxDir(p, id);
  await makeDir(dir);
  let vm: VmHandle | undefined;
  try {
    await writeFile(join(dir, OWNER_FILE), `${process.pid}\n`);
    const spec = { ...sandboxVmSpec(dir, { ...res, accel }), net: req.net };
    await vmm().disks.createOverlay(spec.disk, image.path, 'raw');
    const { placement } = req;
    vm = await vmm().start(
      {
        ...spec,
        boot: {
          kernel: guest.kernel,
          initramfs: guest.initramfs,
          tscKhz: await vmm().hostTscKhz(),
        },
      },
      {
        onSpawn: placement
          ? (pid) => placement.limiter.place(id, placement.limits, pid)
          : req.onSpawn,
      },
    );
    req.onStarted?.(vm);
    req.signal?.throwIfAborted();
    // An OCI image's Env is the sandbox's default environment; the request's wins.
    const agent = await connectGuest(vm, id, { ...req, env: { ...imageEnv(image), ...req.env } });
    return { id, dir, vm, agent, limiter: placement?.limiter };
  } catch (e) {
    await vm?.kill();
    await req.placement?.limiter.remove(id);
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

/**
 * Wait for a booting guest's agent and push its identity, clock and environment. Also
 * finishes the boot of a sandbox whose booting daemon crashed (configure is idempotent).
 */
export async function connectGuest(
  vm: VmHandle,
  id: string,
  req: Pick<BootRequest, 'env' | 'bootTimeoutMs' | 'signal'>,
): Promise<AgentClient> {
  // The guest's address is static and the same everywhere: a fork inherits it configured.
  const { address, gateway, dns } = vmm().guestNet;
  const net = vm.spec.net && vm.spec.boot ? { address, gateway, dns } : undefined;
  const agent = await vm.guard(
    AgentClient.connect(vm.files.agent, {
      timeoutMs: req.bootTimeoutMs ?? 60_000,
      signal: req.signal,
    }),
    'waiting for the guest agent',
  );
  phase('agent: connected');
  try {
    await agent.configure({
      timeMs: Date.now(),
      entropy: randomBytes(64),
      hostname: id,
      env: { FORKD_SANDBOX_ID: id, ...req.env },
      net,
      // A restored fork's terminal sessions are its source's: nobody here can reach them.
      ptyHangup: true,
    });
    phase('agent: configured');
    return agent;
  } catch (e) {
    agent.close();
    throw e;
  }
}

/** End a sandbox: close the agent, end QEMU, remove its cgroup (if it had one) and directory. */
export async function destroySandbox(sb: Sandbox): Promise<void> {
  sb.agent.close();
  await sb.vm.kill();
  phase('teardown: qemu gone');
  await sb.limiter?.remove(sb.id);
  phase('teardown: cgroup removed');
  await rm(sb.dir, { recursive: true, force: true });
}
