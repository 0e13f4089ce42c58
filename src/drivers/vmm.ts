/**
 * The VMM seam (DESIGN.md: "a narrow driver interface so a Firecracker or Cloud Hypervisor
 * driver can sit beside it"): what services need of a virtual machine monitor, as types
 * only. The QEMU driver implements it behind one entry module (index.ts of drivers/qemu);
 * services reach it through the wiring (services/vmm.ts), never a driver's module, and lint
 * keeps it so. A second driver is a folder implementing `Vmm` plus one line of wiring.
 */

/** What a VM is started from: its directory, memory, disk and how it boots or restores. */
export interface VmSpec {
  /** Directory holding the VM's sockets, logs and disk overlay. */
  dir: string;
  memoryMiB: number;
  cpus: number;
  accel: 'kvm' | 'tcg';
  /** TCG translation buffer cap in MiB (`tb-size`); absent or null: the VMM's default. */
  tbMiB?: number | null;
  /** The RAM base file mapped MAP_PRIVATE: /dev/zero for a fresh boot, a memory file for a restore. */
  memPath: string;
  /** The VM's own writable overlay. */
  disk: string;
  /** Present for a cold boot. */
  boot?: { kernel: string; initramfs: string; tscKhz?: number; extraAppend?: string };
  /** Wait for an incoming device-state stream instead of running (restore). */
  incoming?: boolean;
  /** A NIC on user networking; absent: no NIC at all (network `none`). */
  net?: VmNet;
  /**
   * The version of its device set (the VMM's DEVICE_SET when it was made; absent: 1). A
   * restore must give the one its device state was captured with: snapshots and
   * hibernations record it.
   */
  deviceSet?: number;
}

/** The guest's NIC: user networking, run inside a network namespace when `netns` is set. */
export interface VmNet {
  /** The namespace the VMM runs in (a path under /run/netns); absent when not root. */
  netns?: string;
  /** Restricted: the guest reaches nothing but forwarded ports (rootless, offline). */
  restrict?: boolean;
}

/** How a VMM process ended; both null when it was adopted (not our child: no status). */
export interface VmExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** The files of a VM's directory that services read: the agent's socket, logs, pid file. */
export interface VmFiles {
  agent: string;
  console: string;
  log: string;
  pid: string;
}

/** Every guest's address plan, the same in every fork. */
export interface GuestNet {
  readonly address: string;
  readonly gateway: string;
  readonly dns: string;
  readonly mac: string;
}

/** The accelerator chosen for this host, and why. */
export interface AccelChoice {
  accel: 'kvm' | 'tcg';
  reason: string;
}

/** The guest-RAM mapping inside the VMM process. */
export interface RamRegion {
  pid: number;
  start: bigint;
  end: bigint;
  /** Offset of `start` in the base file (the mapping's file offset). */
  fileOffset: bigint;
}

/**
 * A disk layer of a running VM: the name the driver knows it by (opaque to services, kept
 * in branch intents to repair a switch), its file, the disk's virtual size.
 */
export interface DiskLayer {
  name: string;
  file: string;
  size: number;
}

/** One file of a disk chain as its header says: the backing file it names (null: none). */
export interface LayerHeader {
  file: string;
  backing: string | null;
}

/** A disk chain read from the headers, topmost first; `missing`: a backing file not found. */
export interface ChainOnDisk {
  layers: LayerHeader[];
  missing: string | null;
}

export interface CaptureFiles {
  /** New memory file to write (must not exist yet or be disposable). */
  memory: string;
  /** New device-state file (the VMM writes it). */
  deviceState: string;
}

/**
 * How the written pages are taken: `copy` copies them while the VM is stopped (the pause
 * grows with what it wrote); `live` freezes them copy-on-write and copies after resume.
 */
export type CaptureMode = 'copy' | 'live';

/** The pages the VM had written, as copied into the memory file; `ms` as the mode says. */
export interface CapturedPages {
  pages: number;
  bytes: number;
  ms: number;
}

export interface CaptureResult {
  mode: CaptureMode;
  /** stop → resume or stop → device state saved (no resume), in ms. */
  pauseMs: number;
  timings: Record<string, number>;
  /** Settles once every written page is in the memory file (after the copy in `live` mode). */
  pages: Promise<CapturedPages>;
}

export interface CaptureOptions {
  /** Freeze the disk's top layer at the capture instant: the VM goes on writing to `next`. */
  disk?: { top: DiskLayer; next: DiskLayer };
  /** Continue the VM afterwards (branch); without it the VM stays stopped (snapshot create). */
  resume: boolean;
  mode?: CaptureMode;
  /** What the new memory file starts as: a copy of the RAM base, or empty (a diff). */
  start?: 'base' | 'empty';
  /** Runs just before resume (tests read the stopped RAM there). */
  whileStopped?: (r: RamRegion, memoryFile: string) => Promise<void>;
  /** Live mode, just before resume: the bytes the frozen fork shares with the VM. */
  beforeResume?: (sharedBytes: number) => Promise<void>;
}

/** Whether live capture works on this host. */
export interface LiveProbe {
  available: boolean;
  /** Why not, when not. */
  reason: string;
  fork_ms: number;
}

/** What confines one running VMM process, read from the kernel. */
export interface VmConfinement {
  uid: number;
  seccomp: boolean;
  sandbox: string | null;
  /** Whether its filter lets it create processes (what a live branch needs). */
  spawn: boolean;
  capabilities: string;
  /** The namespaces it has of its own beside the network's (its jail): `mount`, `ipc`. */
  namespaces: ('mount' | 'ipc')[];
}

/** One running VM: the handle services keep in their live table. */
/** What a VM's threads did with the host's CPU so far, in seconds (their schedstat). */
export interface CpuTimes {
  /** Time its threads ran, summed. */
  ranS: number;
  /**
   * Per thread (by id), the time it ran or waited runnable: a thread with a job is runnable
   * all the time however crowded the host, an idle one only at its wakeups.
   */
  runnableS: Record<string, number>;
}

export interface VmHandle {
  readonly spec: VmSpec;
  /** The host pid of the VMM process. */
  readonly pid: number;
  readonly files: VmFiles;
  /** True while the VMM process runs. */
  readonly alive: boolean;
  pause(): Promise<void>;
  resume(): Promise<void>;
  /** The guest's run state as the VMM reports it, e.g. `running`, `paused`. */
  status(): Promise<string>;
  /** Save the device state (no RAM) of a stopped VM into `file`. */
  saveDeviceState(file: string): Promise<void>;
  /** Whether the process is gone, asked of the kernel. */
  gone(): Promise<boolean>;
  /** CPU time its threads ran and waited runnable, in seconds; undefined once gone. */
  cpuTimes(): Promise<CpuTimes | undefined>;
  waitExit(): Promise<VmExit>;
  /** Load the device state handed over at start into a VM waiting for it. */
  restore(timeoutMs?: number): Promise<void>;
  /** `p`, or a clear error if the VM exits first. */
  guard<T>(p: Promise<T>, what: string): Promise<T>;
  kill(graceMs?: number): Promise<void>;
  /** Stop watching; the process keeps running (daemon shutdown). */
  detach(): void;
}

/** Disk-layer operations: the chain of files under a VM's disk, and its live top layer. */
export interface VmmDisks {
  /** Create an overlay over a backing file (raw image or frozen layer). */
  createOverlay(file: string, backing: string, backingFormat: 'raw' | 'qcow2'): Promise<void>;
  /** Create a layer file whose header names `backing` (as written), for a switch. */
  createLayerOver(file: string, backing: string, size: number): Promise<void>;
  /** Rebase a layer onto a raw base, copying what differs (no layer in between needed). */
  rebaseOnto(disk: string, base: string): Promise<void>;
  /** Rewrite the backing file a layer's header names (files moved; no data copied). */
  setBacking(disk: string, backing: string, backingFormat: 'raw' | 'qcow2'): Promise<void>;
  readChain(file: string): Promise<ChainOnDisk>;
  /** Whether a file name is one of a sandbox's layers. */
  isLayerFile(name: string): boolean;
  /** The layer the VM writes to now, and the one it writes to after its next freeze. */
  top(vm: VmHandle): Promise<DiskLayer>;
  next(vm: VmHandle, top: DiskLayer): DiskLayer;
  /** Fold the frozen layer named `frozen` back into the top one; whether it did. */
  foldBack(vm: VmHandle, frozen: string): Promise<boolean>;
  /** Fold the layer under the top into it when the top's header names `header`. */
  foldUnderTop(vm: VmHandle, header: string, below: string | null): Promise<string | null>;
  /** Forget a layer made for a switch that never happened (never the top one). */
  discard(vm: VmHandle, layer: DiskLayer): Promise<void>;
  /** The files the VM's disk has open. */
  openFiles(vm: VmHandle): Promise<Set<string>>;
}

/** Memory files: the native helper's diffs, overlays, sparse copies and extents. */
export interface VmmMemory {
  diffOver(pages: string, layers: string[]): Promise<Record<string, number>>;
  overlayInto(diff: string, dst: string): Promise<Record<string, number>>;
  sparseCopy(src: string, dst: string, size: number): Promise<unknown>;
  fileExtents(file: string): Promise<{ size: number; extents: [number, number][] }>;
}

/** A virtual machine monitor, as services see it. */
export interface Vmm {
  /** The VMM's name, as `/version` and manifests record it. */
  readonly name: string;
  /** The VMM binary, for its version. */
  readonly binary: string;
  /** The machine type every VM runs (part of a boot snapshot's key). */
  readonly machine: string;
  readonly guestNet: GuestNet;
  /** The device set (VmSpec.deviceSet) of the VMs it makes now. */
  readonly deviceSet: number;
  accel(): Promise<AccelChoice>;
  hostTscKhz(): Promise<number | undefined>;
  filesOf(dir: string): VmFiles;
  /** Start a VM; `incomingFd` hands a restore its device state; `onSpawn` runs at once. */
  start(
    spec: VmSpec,
    opts?: { incomingFd?: number; onSpawn?: (pid: number) => Promise<void> },
  ): Promise<VmHandle>;
  /** Take over a VM an earlier daemon started, after checking the pid is it. */
  adopt(spec: VmSpec, pid: number, opts?: { pollMs?: number }): Promise<VmHandle>;
  /** The pid the VM's directory records, if any. */
  readPid(dir: string): Promise<number | undefined>;
  /** Whether `pid` is the VMM process of `dir` (never trust a recycled pid). */
  isVmOf(pid: number, dir: string): Promise<boolean>;
  /** SIGKILL it only if `pid` is still the VMM of `dir`; whether it is gone. */
  killVerified(pid: number, dir: string, waitMs?: number): Promise<boolean>;
  capture(vm: VmHandle, files: CaptureFiles, opts: CaptureOptions): Promise<CaptureResult>;
  /** What a live capture of `vm` may add to its memory while it copies. */
  liveCaptureBytes(vm: VmHandle): Promise<number>;
  probeLive(): Promise<LiveProbe>;
  /** End frozen forks a live capture left in the VM (after a crash). */
  reapLiveForks(vm: VmHandle): Promise<{ zombies: number; reaped: number }>;
  /** Host port forwards to a guest port. */
  addPortForward(vm: VmHandle, bind: string, hostPort: number, guestPort: number): Promise<void>;
  removePortForward(vm: VmHandle, bind: string, hostPort: number): Promise<void>;
  /** Confinement: whether it is on, whether each VM gets a uid, what confines one VM. */
  confinement: {
    enabled(): boolean;
    ownUser(): boolean;
    of(pid: number): Promise<VmConfinement | undefined>;
  };
  disks: VmmDisks;
  memory: VmmMemory;
}
