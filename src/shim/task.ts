/**
 * containerd's task service (`containerd.task.v2.Task`). A task started by `ctr` is one
 * forkd sandbox; a pod under CRI is one forkd sandbox for all its tasks (pod.ts), served by
 * one shim. The sandbox is forked from the snapshot the `forkd.dev/snapshot` annotation
 * names, made at the Create of the task or of the pod's sandbox container; without one its
 * root is a container's image, made a forkd image once per chain ID (rootfs.ts): a task's
 * own at its Create, a pod's first app container's at that container's Create (the pod has
 * no VM until then), and a task with no image boots the busybox image. It is labelled with
 * the containerd namespace and the task's (or pod's) id, so `delete` run by a later shim
 * finds it; later app containers join it. Processes and execs run in it through the
 * daemon; Delete of the task that owns the sandbox kills it. The sandbox and its processes
 * live in the daemon: the shim keeps only what containerd asks back (pids, exit statuses)
 * while it runs.
 */
import {
  Sandbox,
  isForkdError,
  DaemonUnreachableError,
  VERSION,
  type SandboxInfo,
} from '@forkd/sdk';
import {
  podPorts,
  processSpec,
  readBundle,
  SNAPSHOT_ANNOTATION,
  type BundleSpec,
} from './bundle.js';
import { Publisher } from './events.js';
import type { ShimLog } from './log.js';
import { PodSandbox, roleOf } from './pod.js';
import { TaskProcess, STATUS, type ProcessIO, type Running } from './process.js';
import { decode, encode, timestamp } from './proto.js';
import { CODE, TtrpcError, type Handler } from './ttrpc.js';
import { cgroupMetrics, Watch } from './watch.js';
import { RootfsImages, rootfsChainId, type Containerd, type Mount } from './rootfs.js';

export const TASK_SERVICE = 'containerd.task.v2.Task';
/** The shim's own service: `start` asks a running shim to keep a task's place. */
export const SHIM_SERVICE = 'forkd.shim.v1.Shim';

/** How long a place reserved by `start` waits for containerd's Create. */
const RESERVE_MS = 60_000;
/** How often the shim asks the daemon whether its sandboxes still run. */
const WATCH_MS = 2_000;

/** The labels that tie a sandbox to its containerd task. */
export const LABEL = { namespace: 'containerd.io/namespace', id: 'containerd.io/id' } as const;

interface IdRequest {
  id: string;
  exec_id: string;
}

interface CreateRequest extends ProcessIO {
  id: string;
  bundle: string;
  rootfs: Mount[];
}

interface ExecRequest extends IdRequest, ProcessIO {
  spec: { type_url: string; value: Buffer } | null;
}

interface ResizeRequest extends IdRequest {
  width: number;
  height: number;
}

interface KillRequest extends IdRequest {
  signal: number;
  all: boolean;
}

/** A containerd timestamp, or none (the zero time) when `ms` is undefined. */
const at = (ms: number | undefined) => (ms === undefined ? undefined : timestamp(ms));

/** Whether the daemon has the sandbox in a tier below running (paused, hibernated, halted). */
async function pausedTier(sandbox: Sandbox): Promise<boolean> {
  const { tier } = await sandbox.refresh();
  return tier !== undefined && tier !== 'running';
}

/** The gRPC code of a daemon error's HTTP status (others: Unknown). */
const CODE_OF_STATUS: Record<number, number> = {
  400: CODE.invalidArgument,
  403: CODE.permissionDenied,
  404: CODE.notFound,
  409: CODE.failedPrecondition,
  503: CODE.unavailable,
};

/** A daemon error as a ttrpc status containerd maps to its own error kinds. */
export function statusOf(e: unknown): unknown {
  if (e instanceof TtrpcError) return e;
  if (e instanceof DaemonUnreachableError) {
    return new TtrpcError(
      CODE.unavailable,
      `${e.message}: start the node's forkd daemon (or set FORKD_URL in containerd's environment)`,
    );
  }
  if (isForkdError(e)) {
    const code = CODE_OF_STATUS[e.status] ?? CODE.unknown;
    return new TtrpcError(code, `forkd: ${e.message} (${e.code})`);
  }
  return e;
}

export interface TaskServiceOptions {
  namespace: string;
  /** containerd's gRPC socket (`-address`); empty: tasks without a snapshot boot busybox. */
  address: string;
  publisher: Publisher;
  log: ShimLog;
  /** Called once Shutdown may end the shim. */
  shutdown(): void;
}

/** The state of one task the shim serves. */
interface Task {
  id: string;
  bundle: string;
  /** The sandbox it runs in, shared by every task of a pod. */
  pod: PodSandbox;
  /** Whether this task owns the sandbox (and its Delete kills it). */
  owner: boolean;
  /** What its bundle asks of the sandbox it owns (a pod's VM made later takes it). */
  asks?: SandboxAsks;
  init: TaskProcess;
  execs: Map<string, TaskProcess>;
}

/**
 * What a task's bundle asks of its sandbox: limits, and for a pod on a CNI network its
 * namespace, the guest NATed to the pod's IP and the `forkd.dev/ports` forwarded from it.
 */
interface SandboxAsks {
  limits?: BundleSpec['limits'];
  netns?: string;
  ports?: number[];
}

/** Usage of a pod that has no VM yet: nothing. */
const NO_USAGE = { cpuSeconds: 0, memoryBytes: 0, throttledSeconds: 0, oomKills: 0 };

export class TaskService {
  private readonly tasks = new Map<string, Task>();
  /**
   * Tasks whose `start` chose this shim, until containerd has created them: a timer while
   * containerd has not asked yet, none while their Create runs (a cold boot may take longer
   * than the timer).
   */
  private readonly reserved = new Map<string, NodeJS.Timeout | undefined>();
  /** Set once the shim ends: a `start` then makes a new one. */
  private ending = false;
  private readonly watch: Watch<Task>;
  private readonly images: RootfsImages;

  constructor(private readonly o: TaskServiceOptions) {
    this.watch = new Watch(`${LABEL.namespace}=${o.namespace}`, WATCH_MS, (task, info) =>
      this.vmEnded(task, info),
    );
    this.images = new RootfsImages(o.log.write);
  }

  /** Keep task `id`'s place until its Create (or RESERVE_MS): the shim does not end meanwhile. */
  reserve(id: string): void {
    if (this.ending) throw new TtrpcError(CODE.unavailable, 'this shim is ending: start another');
    clearTimeout(this.reserved.get(id));
    const timer = setTimeout(() => {
      this.reserved.delete(id);
      if (this.idle()) this.end(); // containerd gave up on it: nothing keeps the shim
    }, RESERVE_MS);
    this.reserved.set(id, timer);
  }

  private idle(): boolean {
    return this.tasks.size === 0 && this.reserved.size === 0;
  }

  private end(): void {
    this.ending = true;
    this.watch.stop();
    this.o.shutdown();
  }

  /** The ttrpc handlers, `service/method` → handler; methods not here are NotImplemented. */
  handlers(): Map<string, Handler> {
    const methods: Record<string, [string, (req: never) => Promise<object>, string]> = {
      Create: ['task.CreateTaskRequest', (r: CreateRequest) => this.create(r), 'task.PidResponse'],
      Start: ['task.IdRequest', (r: IdRequest) => this.start(r), 'task.PidResponse'],
      Wait: ['task.IdRequest', (r: IdRequest) => this.wait(r), 'task.WaitResponse'],
      Kill: ['task.KillRequest', (r: KillRequest) => this.kill(r), 'google.protobuf.Empty'],
      Delete: ['task.IdRequest', (r: IdRequest) => this.delete(r), 'task.DeleteResponse'],
      State: ['task.IdRequest', (r: IdRequest) => this.state(r), 'task.StateResponse'],
      Pids: ['task.IdRequest', (r: IdRequest) => this.pids(r), 'task.PidsResponse'],
      Exec: ['task.ExecProcessRequest', (r: ExecRequest) => this.exec(r), 'google.protobuf.Empty'],
      ResizePty: [
        'task.ResizePtyRequest',
        (r: ResizeRequest) =>
          this.lookup(r)
            .p.resize(r.width, r.height)
            .then(() => ({})),
        'google.protobuf.Empty',
      ],
      CloseIO: ['task.CloseIORequest', async () => ({}), 'google.protobuf.Empty'],
      Stats: ['task.IdRequest', (r: IdRequest) => this.stats(r), 'task.StatsResponse'],
      Pause: ['task.IdRequest', (r: IdRequest) => this.pause(r, true), 'google.protobuf.Empty'],
      Resume: ['task.IdRequest', (r: IdRequest) => this.pause(r, false), 'google.protobuf.Empty'],
      Connect: ['task.IdRequest', (r: IdRequest) => this.connect(r), 'task.ConnectResponse'],
      Shutdown: [
        'task.ShutdownRequest',
        (r: { now: boolean }) => this.shutdown(r),
        'google.protobuf.Empty',
      ],
    };
    const handlers = new Map<string, Handler>();
    const reserve = async (r: IdRequest) => (this.reserve(r.id), this.connect(r));
    const all = [
      ...Object.entries(methods).map(([m, h]) => [`${TASK_SERVICE}/${m}`, h] as const),
      [`${SHIM_SERVICE}/Reserve`, ['task.IdRequest', reserve, 'task.ConnectResponse']] as const,
    ];
    for (const [name, [reqType, fn, resType]] of all) {
      handlers.set(name, async (payload) => {
        try {
          return encode(resType, await fn(decode<never>(reqType, payload)));
        } catch (e) {
          throw statusOf(e);
        }
      });
    }
    return handlers;
  }

  private async create(r: CreateRequest): Promise<object> {
    if (this.tasks.has(r.id)) {
      throw new TtrpcError(CODE.alreadyExists, `task ${r.id} already exists in this shim`);
    }
    clearTimeout(this.reserved.get(r.id));
    this.reserved.set(r.id, undefined);
    let task: Task;
    try {
      const bundle = await readBundle(r.bundle);
      this.o.log.open(r.id, r.bundle);
      const role = roleOf(bundle.annotations, r.id);
      task =
        role.kind === 'container'
          ? await this.joinPod(r, bundle, role.pod)
          : await this.makeSandbox(r, bundle, role.kind === 'pod');
      this.tasks.set(r.id, task);
    } finally {
      this.reserved.delete(r.id);
    }
    if (task.owner) this.watch.add(task);
    await this.o.publisher.publish('/tasks/create', {
      container_id: r.id,
      bundle: r.bundle,
      rootfs: r.rootfs,
      io: { stdin: r.stdin, stdout: r.stdout, stderr: r.stderr, terminal: r.terminal },
      pid: 0,
    });
    return { pid: 0 };
  }

  /**
   * A task with a sandbox of its own: a ctr task, or a pod's sandbox container. A pod's VM
   * runs in the pod's network namespace (CNI's), whether forked from a snapshot or made
   * from an image. A pod without a snapshot has no VM until its first app container
   * (joinPod) makes it from that container's image.
   */
  private async makeSandbox(r: CreateRequest, bundle: BundleSpec, pod: boolean): Promise<Task> {
    const snapshot = bundle.annotations[SNAPSHOT_ANNOTATION];
    const ports = podPorts(bundle.annotations);
    const netns = pod ? bundle.netns : undefined;
    const asks: SandboxAsks = { limits: bundle.limits, ...(netns ? { netns, ports } : {}) };
    let vm: Sandbox | undefined;
    if (snapshot) vm = await this.newSandbox(r.id, { snapshot }, asks);
    else if (!pod) vm = await this.imageSandbox(r.id, r, asks);
    const task: Task = {
      id: r.id,
      bundle: r.bundle,
      pod: new PodSandbox(vm),
      owner: true,
      asks,
      init: this.process(r.id, '', bundle.process, r, pod ? () => task.pod.hold() : undefined),
      execs: new Map(),
    };
    if (!vm) this.o.log.write(`pod ${r.id}: no VM until its first container names its image`);
    return task;
  }

  /**
   * A sandbox of task (or pod) `id`, labelled so a later shim's `delete` finds it: a fork of
   * `from.snapshot`, else a start of `from.image` (busybox when none).
   */
  private async newSandbox(
    id: string,
    from: { snapshot?: string; image?: string },
    opts: SandboxAsks,
  ): Promise<Sandbox> {
    const image = from.image ?? 'busybox';
    const sandbox = await Sandbox.create({
      ...(from.snapshot ? { snapshot: from.snapshot } : { image }),
      ...(opts.netns ? { netns: opts.netns, forwardPorts: opts.ports } : {}),
      ...(opts.limits ? { limits: opts.limits } : {}),
      labels: { [LABEL.namespace]: this.o.namespace, [LABEL.id]: id },
    });
    const how = from.snapshot ? `forked from ${from.snapshot}` : `from image ${image}`;
    this.o.log.write(`task ${id}: sandbox ${sandbox.id} ${how}`);
    return sandbox;
  }

  /**
   * A sandbox of task (or pod) `id` on the image of container `r` (rootImage). An image the
   * daemon removed between the look-up and the start (pruned: unused for its cache time) is
   * made again, once.
   */
  private async imageSandbox(id: string, r: CreateRequest, asks: SandboxAsks): Promise<Sandbox> {
    const image = await this.rootImage(r);
    try {
      return await this.newSandbox(id, { image }, asks);
    } catch (e) {
      if (!image || !isForkdError(e, 'image_not_found')) throw e;
      return this.newSandbox(id, { image: await this.rootImage(r) }, asks);
    }
  }

  /**
   * The forkd image of task `r`'s container image, made on its first use; undefined for a
   * task containerd made from no image (`ctr run --rootfs DIR`).
   */
  private async rootImage(r: CreateRequest): Promise<string | undefined> {
    if (!this.o.address) return undefined;
    const c: Containerd = { address: this.o.address, namespace: this.o.namespace };
    let chainId: string | undefined;
    try {
      chainId = await rootfsChainId(c, r.id);
    } catch (e) {
      throw new TtrpcError(
        CODE.unavailable,
        `cannot ask containerd which image task ${r.id} is made from: ${(e as Error).message}`,
      );
    }
    return chainId && this.images.image(chainId, r.rootfs, r.bundle);
  }

  /**
   * An app container of pod `pod`: a process in the pod's sandbox. The first of a pod
   * without a VM makes it, from its own image (the next ones run in that root).
   */
  private async joinPod(r: CreateRequest, bundle: BundleSpec, pod: string): Promise<Task> {
    const owner = this.tasks.get(pod);
    if (!owner?.owner || owner.init.status === STATUS.stopped) {
      throw new TtrpcError(
        CODE.failedPrecondition,
        `pod sandbox ${pod} is not running in this shim: run the pod (RunPodSandbox) first`,
      );
    }
    await owner.pod.get(async () => {
      this.o.log.write(`pod ${pod}: its VM is made from the image of container ${r.id}`);
      const vm = await this.imageSandbox(pod, r, owner.asks ?? {});
      // The sandbox container's pid from now on: the VMM's, as for a pod made at once.
      owner.init.pid = (await vm.refresh()).pid ?? 0;
      return vm;
    });
    const init = this.process(r.id, '', bundle.process, r);
    return { id: r.id, bundle: r.bundle, pod: owner.pod, owner: false, init, execs: new Map() };
  }

  /** A process of task `id` whose exit is published; `execId` empty for the init. */
  private process(
    id: string,
    execId: string,
    spec: TaskProcess['spec'],
    io: ProcessIO,
    launch?: () => Promise<Running>,
  ) {
    return new TaskProcess(
      execId,
      spec,
      io,
      (p) =>
        void this.o.publisher.publish('/tasks/exit', {
          container_id: id,
          id: execId || id,
          pid: p.pid,
          exit_status: p.exitStatus,
          exited_at: at(p.exitedAt),
        }),
      this.o.log.write,
      launch,
      () => this.lost(id),
    );
  }

  /** A process of task `id` lost its stream: see whether its sandbox ended (watch.ts). */
  private async lost(id: string): Promise<void> {
    const pod = this.tasks.get(id)?.pod;
    const owner = [...this.tasks.values()].find((t) => t.owner && t.pod === pod);
    if (owner) await this.watch.check(owner);
  }

  /** The task `id` names, or NotFound. */
  private get(id: string): Task {
    const task = this.tasks.get(id);
    if (!task) throw new TtrpcError(CODE.notFound, `task ${id} not found in this shim`);
    return task;
  }

  private lookup(r: IdRequest): { task: Task; p: TaskProcess } {
    const task = this.get(r.id);
    const p = r.exec_id ? task.execs.get(r.exec_id) : task.init;
    if (!p) throw new TtrpcError(CODE.notFound, `exec ${r.exec_id} not found in task ${r.id}`);
    return { task, p };
  }

  private async start(r: IdRequest): Promise<object> {
    const { task, p } = this.lookup(r);
    const pid = await p.start(task.pod.vm);
    if (r.exec_id) {
      await this.o.publisher.publish('/tasks/exec-started', {
        container_id: task.id,
        exec_id: r.exec_id,
        pid,
      });
    } else await this.o.publisher.publish('/tasks/start', { container_id: task.id, pid });
    return { pid };
  }

  private async wait(r: IdRequest): Promise<object> {
    const { p } = this.lookup(r);
    await p.exited;
    return { exit_status: p.exitStatus, exited_at: at(p.exitedAt) };
  }

  private async kill(r: KillRequest): Promise<object> {
    const { task, p } = this.lookup(r);
    await p.kill(r.signal);
    if (r.all && !r.exec_id) {
      const running = [...task.execs.values()].filter((e) => e.status === STATUS.running);
      await Promise.all(running.map((e) => e.kill(r.signal).catch(() => undefined)));
    }
    return {};
  }

  private async delete(r: IdRequest): Promise<object> {
    const { task, p } = this.lookup(r);
    if (p.status === STATUS.running) {
      throw new TtrpcError(
        CODE.failedPrecondition,
        `process ${r.exec_id || r.id} is running: kill it first (ctr task kill)`,
      );
    }
    if (r.exec_id) {
      task.execs.delete(r.exec_id);
    } else {
      if (task.owner) {
        this.watch.remove(task);
        await task.pod.kill();
      }
      this.tasks.delete(task.id);
      await this.o.publisher.publish('/tasks/delete', {
        container_id: task.id,
        pid: p.pid,
        exit_status: p.exitStatus,
        exited_at: at(p.exitedAt),
        id: task.id,
      });
      this.o.log.close(task.id);
    }
    return { pid: p.pid, exit_status: p.exitStatus, exited_at: at(p.exitedAt) };
  }

  /**
   * Pause puts the sandbox in forkd's `paused` idle tier (QEMU stopped, memory kept);
   * Resume wakes it. Either is a no-op on a task already there.
   */
  private async pause(r: IdRequest, pause: boolean): Promise<object> {
    const task = this.get(r.id);
    const vm = task.pod.vm;
    if (!vm) {
      throw new TtrpcError(
        CODE.failedPrecondition,
        `pod ${task.id} has no VM to pause yet: it is made when its first container starts`,
      );
    }
    if ((await pausedTier(vm)) === pause) return {};
    if (pause) await vm.pause({ tier: 'paused' });
    else await vm.resume();
    await this.o.publisher.publish(pause ? '/tasks/paused' : '/tasks/resumed', {
      container_id: task.id,
    });
    return {};
  }

  private async state(r: IdRequest): Promise<object> {
    const { task, p } = this.lookup(r);
    const running = p.status === STATUS.running;
    return {
      id: r.exec_id || task.id,
      exec_id: r.exec_id,
      bundle: task.bundle,
      pid: p.pid,
      status: running && task.pod.vm && (await pausedTier(task.pod.vm)) ? STATUS.paused : p.status,
      ...p.io,
      exit_status: p.exitStatus,
      exited_at: at(p.exitedAt),
    };
  }

  private async pids(r: IdRequest): Promise<object> {
    const task = this.get(r.id);
    const all = [task.init, ...task.execs.values()];
    return {
      processes: all.filter((p) => p.status === STATUS.running).map((p) => ({ pid: p.pid })),
    };
  }

  private async exec(r: ExecRequest): Promise<object> {
    const task = this.get(r.id);
    if (task.execs.has(r.exec_id)) {
      throw new TtrpcError(CODE.alreadyExists, `exec ${r.exec_id} already exists in task ${r.id}`);
    }
    let spec: unknown;
    try {
      spec = JSON.parse(r.spec?.value.toString('utf8') ?? '');
    } catch {
      throw new TtrpcError(CODE.invalidArgument, `exec ${r.exec_id} has no process spec (JSON)`);
    }
    const p = this.process(r.id, r.exec_id, processSpec(spec as object, `exec ${r.exec_id}`), r);
    task.execs.set(r.exec_id, p);
    await this.o.publisher.publish('/tasks/exec-added', {
      container_id: r.id,
      exec_id: r.exec_id,
    });
    return {};
  }

  private async connect(r: IdRequest): Promise<object> {
    const pid = this.tasks.get(r.id)?.init.pid ?? 0;
    return { shim_pid: process.pid, task_pid: pid, version: VERSION };
  }

  /**
   * Ends the shim once all its tasks are deleted and no `start` has chosen it since (or
   * with `now`), as containerd's shims do: it serves the namespace's other tasks until then.
   */
  private async shutdown(r: { now: boolean }): Promise<object> {
    if (r.now || this.idle()) this.end();
    return {};
  }

  /**
   * Stats: the cgroup of the sandbox's QEMU, as forkd measures it (its memory charged now and
   * limit, its CPU time), in cgroup v1's Metrics message, which `ctr task metrics` and CRI's
   * ContainerStats read. Every task of a pod reports the pod's VM: its containers share it.
   */
  private async stats(r: IdRequest): Promise<object> {
    const task = this.get(r.id);
    if (!task.pod.vm) return { stats: cgroupMetrics(NO_USAGE, task.asks?.limits?.memory) };
    const info = await task.pod.vm.refresh();
    if (!info.usage) {
      throw new TtrpcError(
        CODE.unavailable,
        `sandbox ${info.id} has no cgroup usage: the daemon enforces no limits on this host (forkd doctor)`,
      );
    }
    return { stats: cgroupMetrics(info.usage, info.limits?.memoryBytes ?? undefined) };
  }

  /**
   * A task's VM ended without a Kill (the host's OOM killer at its memory limit, a crash):
   * each task on it gets `/tasks/oom` first when it was an OOM kill, then its processes exit.
   */
  private async vmEnded(owner: Task, info: SandboxInfo | undefined): Promise<void> {
    const oom = info?.reason?.startsWith('out of memory') ?? false;
    this.o.log.write(
      `sandbox ${owner.pod.vm?.id} of task ${owner.id} ended: ${info?.reason ?? 'gone'}`,
    );
    const on = [...this.tasks.values()].filter((t) => t.pod === owner.pod);
    for (const task of on) {
      if (oom) await this.o.publisher.publish('/tasks/oom', { container_id: task.id });
      for (const p of [task.init, ...task.execs.values()]) p.vmEnded();
    }
  }
}
