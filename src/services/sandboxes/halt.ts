/**
 * The halted tier (docs/idle.md): a sandbox that keeps only its disk. Its guest syncs its
 * filesystems, its QEMU ends, and nothing of its memory is kept (no capture, unlike a
 * hibernation); a wake boots the guest kernel cold on that disk under the same id, with its
 * network, policy, published ports, cgroup and environment put back. E2B's filesystem-only
 * pause (`pause({ keepMemory: false })`) is this tier.
 *
 * What a wake needs is written in `halted.json` in the sandbox's directory, which stays
 * after the wake: it says the sandbox was booted cold, so its RAM base is no longer its
 * snapshot's memory (ramBaseOf in hibernate.ts).
 */
import { existsSync } from 'node:fs';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { AgentClient } from '../../drivers/agent/client.js';
import type { VmHandle } from '../../drivers/vmm.js';
import { ForkdError } from '../../errors.js';
import { crashPoint } from '../../util/crash.js';
import { locateGuest } from '../guest.js';
import { getImage, imageEnv } from '../images/index.js';
import type { Endings } from './ending.js';
import type { Gate } from './gate.js';
import {
  HALT_FILE,
  hibernationFiles,
  readImage,
  type DiskNet,
  type NetImage,
  type StartOnDisk,
} from './hibernate.js';
import type { Live } from './live.js';
import type { SandboxParts } from './parts.js';
import { connectGuest, sandboxVmSpec } from './sandbox.js';
import { vmm } from '../vmm.js';

/** What a cold boot of a halted sandbox needs, as written in its directory. */
export interface HaltImage extends NetImage {
  /** The disk layer its QEMU wrote to (the chain under it is in the layers' headers). */
  disk: string;
  /** Whether it has a NIC, and slirp's `restrict` (rootless hosts). */
  nic: boolean;
  restrict?: boolean;
  halted_at: string;
}

/** The file that records a halt (and, once woken, that the sandbox was booted cold). */
export function haltFile(dir: string): string {
  return join(dir, HALT_FILE);
}

/** Whether the sandbox in `dir` was halted at least once (it runs from a cold boot since). */
export function wasHalted(dir: string): boolean {
  return existsSync(haltFile(dir));
}

export async function readHalt(dir: string): Promise<HaltImage> {
  return JSON.parse(await readFile(haltFile(dir), 'utf8')) as HaltImage;
}

/** How long the guest's `sync` may take (a loaded TCG guest with much written is slow). */
const SYNC_TIMEOUT_MS = 120_000;

/**
 * Flush the guest's filesystems to its disk: `sync`, else busybox's. A guest with neither
 * is refused before anything changes: ending its QEMU would lose what its page cache holds.
 */
async function syncGuest(id: string, agent: AgentClient): Promise<void> {
  for (const argv of [['sync'], ['busybox', 'sync']]) {
    const r = await agent.run({ argv, timeoutMs: SYNC_TIMEOUT_MS }).catch(() => undefined);
    if (r?.exitCode === 0) return;
  }
  throw new ForkdError(
    'bad_request',
    `sandbox ${id} has no \`sync\` command in its guest, so its filesystems cannot be flushed before its VM ends: hibernate it instead (tier hibernated keeps memory and disk)`,
    { id, tier: 'halted' },
  );
}

/** What the idle tiers lend the halt moves: the network part of a sandbox, and its wake. */
export interface HaltNet {
  netImage(id: string): Promise<NetImage>;
  wakeOnDisk(live: Live, image: DiskNet, start: StartOnDisk): Promise<void>;
}

export class Halts {
  constructor(
    private readonly p: SandboxParts,
    private readonly endings: Endings,
    private readonly net: HaltNet,
    private readonly boot: {
      bootTimeoutMs: number;
      /** The daemon's boot gate: the wake is a cold boot, counted as any other. */
      gate: Gate;
    },
  ) {}

  /**
   * Halt it: from running or paused, its guest syncs, its QEMU stops (QEMU flushes its own
   * disk caches then) and ends; from hibernated, its capture is dropped. Its cgroup and
   * network namespace go; its published ports keep listening, as a hibernated one's do.
   */
  async halt(live: Live): Promise<void> {
    const image = live.vm ? await this.stopGuest(live, live.vm) : await this.fromCapture(live);
    await writeFile(`${haltFile(live.dir)}.new`, JSON.stringify(image, null, 2));
    await rename(`${haltFile(live.dir)}.new`, haltFile(live.dir));
    // Recorded before its QEMU ends: a daemon that dies from here on holds it halted.
    this.p.table.rows.update(live.id, { tier: 'halted' });
    crashPoint('halt:recorded');
    const vm = live.vm;
    live.vm = undefined; // its exit is ours from here on, not a death
    live.agent?.close();
    live.agent = undefined;
    await vm?.kill();
    await rm(hibernationFiles(live.dir).dir, { recursive: true, force: true });
    await this.p.network?.hibernate(live.id);
    await this.p.limiter.remove(live.id);
    this.p.log.info({ sandbox: live.id }, 'sandbox halted');
  }

  /** Sync a running or paused guest, then stop it; the image of its disk and network. */
  private async stopGuest(live: Live, vm: VmHandle): Promise<HaltImage> {
    if (live.tier === 'paused') await vm.resume(); // a stopped guest cannot sync
    await syncGuest(live.id, live.agent as AgentClient).catch(async (e: unknown) => {
      if (live.tier === 'paused') await vm.pause().catch(() => undefined);
      throw e;
    });
    await vm.pause();
    return {
      disk: (await vmm().disks.top(vm)).file,
      nic: vm.spec.net !== undefined,
      ...(vm.spec.net?.restrict ? { restrict: true } : {}),
      ...(await this.net.netImage(live.id)),
      halted_at: new Date().toISOString(),
    };
  }

  /** A hibernated sandbox's halt: its capture names the disk and network; its memory goes. */
  private async fromCapture(live: Live): Promise<HaltImage> {
    const { disk, nic, restrict, egress, ports } = await readImage(live.dir);
    return { disk, nic, restrict, egress, ports, halted_at: new Date().toISOString() };
  }

  /**
   * Boot it cold on its disk under its id: a network of its own again (the same policy and
   * published host ports), its cgroup, its environment pushed as at its create. It passes
   * the boot gate as a boot from an image does (`capacity` past it: it stays halted). On
   * failure the new QEMU ends and it stays halted.
   */
  reboot(live: Live): Promise<void> {
    return this.boot.gate.around(() => this.bootOnDisk(live));
  }

  private async bootOnDisk(live: Live): Promise<void> {
    const image = await readHalt(live.dir);
    const row = this.p.table.row(live.id);
    await this.net.wakeOnDisk(live, image, async (net, onSpawn) => {
      const guest = await locateGuest(this.p.paths);
      const { accel } = await vmm().accel();
      const res = { memoryMiB: row.memory_mib, cpus: row.cpus, accel };
      const spec = {
        ...sandboxVmSpec(live.dir, res),
        disk: image.disk,
        net,
        boot: {
          kernel: guest.kernel,
          initramfs: guest.initramfs,
          tscKhz: await vmm().hostTscKhz(),
        },
      };
      const vm = await vmm().start(spec, { onSpawn });
      try {
        const env = { ...(await this.imageEnvOf(row.image)), ...row.env };
        const { bootTimeoutMs } = this.boot;
        const agent = await connectGuest(vm, live.id, { env, bootTimeoutMs });
        return { vm, agent };
      } catch (e) {
        await vm.kill();
        throw e;
      }
    });
    live.execDefaults = undefined;
    this.p.log.info({ sandbox: live.id, pid: live.vm?.pid }, 'halted sandbox booted');
  }

  /** An OCI image's Env, the default environment a boot from it had (none once it is gone). */
  private async imageEnvOf(name: string | null): Promise<Record<string, string>> {
    if (!name) return {};
    return getImage(this.p.paths, name)
      .then(imageEnv)
      .catch(() => ({}));
  }
}
