/**
 * `Sandbox`: create (boot from an image, or fork from a snapshot), connect to, list and
 * kill sandboxes, each static call with an instance twin, the `commands` and `files` of
 * one sandbox, and branching it into a snapshot. `await using` kills it.
 */
import { branchSandbox, type BranchOptions, type BranchResult } from './branch.js';
import { Commands } from './commands.js';
import {
  Contexts,
  evalFork,
  evalCode,
  type EvalForkResult,
  type Execution,
  type EvalOptions,
} from './contexts.js';
import { Forkd, type CallOptions } from './client.js';
import type { ClientConfig } from './config.js';
import { Files } from './files.js';
import type {
  EgressPolicy,
  IdleOptions,
  LimitsOptions,
  NetworkMode,
  PublishedPort,
  SandboxInfo,
  SandboxNetwork,
  SandboxState,
} from './types.js';
import {
  compact,
  egressToWire,
  fromWire,
  idleBody,
  limitsBody,
  networkFromWire,
  PUBLISHED_PORT,
  sandboxFromWire,
  toSeconds,
  type CreateSandboxBody,
} from './wire.js';
import {
  sandboxPath,
  getInfo,
  deleteSandbox,
  type KillOptions,
  patchTimeout,
  patchSandbox,
  tierMove,
  consoleLog,
} from './sandbox-requests.js';
import { Pty } from './pty.js';

/**
 * Options of the static calls: where the daemon is, and a signal.
 *
 * @example
 * const sbx = await Sandbox.connect(id, { url: 'unix:/run/forkd.sock', signal: AbortSignal.timeout(5000) });
 */
export interface SandboxOptions extends ClientConfig, CallOptions {}

/**
 * What sandbox to create. Every field is optional: the daemon's defaults apply. With
 * `snapshot` it is forked from that snapshot, already warm, and takes the snapshot's image,
 * memory and cpus (giving those too is a BadRequestError).
 *
 * @example
 * const sbx = await Sandbox.create({ image: 'busybox', memoryMib: 512, timeoutMs: 10 * 60_000 });
 * const warm = await Sandbox.create({ snapshot: 'py-numpy', labels: { job: '7' } });
 */
export interface SandboxCreateOptions extends SandboxOptions {
  image?: string;
  /** Fork from this snapshot's tag instead of booting an image. */
  snapshot?: string;
  memoryMib?: number;
  cpus?: number;
  /** Environment every command in it sees. */
  env?: Record<string, string>;
  /** Kill it after this long (the daemon counts whole seconds; rounded up). */
  timeoutMs?: number;
  labels?: Record<string, string>;
  /** `nat` (default): a NIC; `none`: no NIC. A fork takes its snapshot's. */
  network?: NetworkMode;
  /** Egress policy (default: internet on, host and private ranges off). */
  egress?: EgressPolicy;
  /** Caps on its QEMU on the host; a fork inherits its snapshot's (docs/limits.md). */
  limits?: LimitsOptions;
  /** When it pauses itself after its last request; a fork does not inherit it (docs/idle.md). */
  idle?: IdleOptions;
  /**
   * Run its QEMU in this network namespace (a path, as a Kubernetes pod's) instead of one of
   * forkd's; the guest's traffic leaves from the namespace's addresses (docs/kubernetes.md).
   * A fork needs a snapshot with network nat; a start from an image needs network nat.
   */
  netns?: string;
  /** With `netns`: guest TCP ports forwarded from every address of the namespace. */
  forwardPorts?: number[];
  /**
   * Boot the image's kernel for real instead of forking the image's boot snapshot
   * (docs/snapshots.md "Boot snapshots"); not with `snapshot`.
   */
  cold?: boolean;
}

/**
 * What `sbx.update` changes in one request (PATCH); fields left out are not touched.
 *
 * @example
 * const changes: SandboxUpdate = { idle: { pauseAfterMs: 30_000 }, timeoutMs: 600_000 };
 */
export interface SandboxUpdate {
  /** New caps on its QEMU; kinds left out keep their value (see `setLimits`). */
  limits?: LimitsOptions;
  /**
   * Its new idle policy, at once; times left out keep their value; null: the daemon's
   * defaults again (see `setIdle`).
   */
  idle?: IdleOptions | null;
  /** Expire this long from now (whole seconds, rounded up). */
  timeoutMs?: number;
}

/**
 * Which sandboxes to list.
 *
 * @example
 * const mine = await Sandbox.list({ state: 'running', label: 'owner=alice' });
 */
export interface SandboxListOptions extends SandboxOptions {
  state?: SandboxState;
  /** `key=value`: only sandboxes with that label. */
  label?: string;
}

/** Wraps a sandbox the daemon reported; set by the class, whose constructor is private. */
let wrap: (client: Forkd, info: SandboxInfo) => Sandbox;

/**
 * The Sandbox object of a sandbox the daemon just reported (a fork's children). For the
 * SDK's own modules: not exported from the package.
 *
 * @example
 * const children = result.sandboxes.map((s) => sandboxOf(client, sandboxFromWire(s)));
 */
export function sandboxOf(client: Forkd, info: SandboxInfo): Sandbox {
  return wrap(client, info);
}

/**
 * A running microVM sandbox.
 *
 * @example
 * await using sbx = await Sandbox.create({ image: 'busybox' });
 * const { stdout } = await sbx.commands.run('echo hello');
 */
export class Sandbox {
  static {
    wrap = (client, info) => new Sandbox(client, info);
  }

  /**
   * Run commands in it.
   *
   * @example
   * await sbx.commands.run(['ls', '-l', '/']);
   */
  readonly commands: Commands;
  /**
   * Read and write its files.
   *
   * @example
   * await sbx.files.write('/tmp/x', 'data');
   */
  readonly files: Files;
  /**
   * Its code contexts (warm interpreters).
   *
   * @example
   * await sbx.contexts.list();
   */
  readonly contexts: Contexts;
  /**
   * Interactive terminal sessions.
   *
   * @example
   * const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => process.stdout.write(d) });
   */
  readonly pty: Pty;
  private current: SandboxInfo;

  private constructor(
    private readonly client: Forkd,
    info: SandboxInfo,
  ) {
    this.current = info;
    this.commands = new Commands(client.transport, sandboxPath(info.id));
    this.files = new Files(client.transport, sandboxPath(info.id));
    this.contexts = new Contexts(client.transport, sandboxPath(info.id));
    this.pty = new Pty(client.transport, sandboxPath(info.id));
  }

  /**
   * Eval code in a context: a warm interpreter that keeps its state between calls (default
   * context `python`, created on first use); forks of the sandbox inherit it.
   *
   * @example
   * await sbx.eval('import numpy as np; a = np.arange(3)');
   * console.log((await sbx.eval('a.sum()')).text); // '3'
   */
  eval(code: string, opts?: EvalOptions): Promise<Execution> {
    return evalCode(this.client.transport, sandboxPath(this.id), code, opts);
  }

  /**
   * The same as {@link Sandbox.eval}, under the name E2B's code interpreter uses (kept as
   * an alias; docs/eval.md).
   *
   * @example
   * console.log((await sbx.runCode('6 * 7')).text); // '42'
   */
  runCode(code: string, opts?: EvalOptions): Promise<Execution> {
    return this.eval(code, opts);
  }

  /**
   * Fan-out: branch the sandbox into one child per variant, run each there, get all results.
   *
   * @example
   * const { results } = await sbx.evalFork(['f(1)', 'f(2)', 'f(3)']);
   */
  evalFork(
    variants: string[],
    opts?: { context?: string; timeoutMs?: number; keep?: boolean } & CallOptions,
  ): Promise<EvalForkResult> {
    return evalFork(this.client.transport, sandboxPath(this.id), variants, opts);
  }

  /**
   * Its id, like `sbx-0123456789ab`.
   *
   * @example
   * console.log(sbx.id);
   */
  get id(): string {
    return this.current.id;
  }

  /**
   * What was last heard of it (at create, connect, refresh or setTimeout).
   *
   * @example
   * console.log(sbx.info.state, sbx.info.expiresAt);
   */
  get info(): SandboxInfo {
    return this.current;
  }

  /**
   * Boot a new sandbox (or fork one from `snapshot`) and resolve once it answers.
   *
   * @example
   * const sbx = await Sandbox.create({ image: 'busybox', labels: { job: '42' } });
   */
  static async create(opts: SandboxCreateOptions = {}): Promise<Sandbox> {
    const client = new Forkd(opts);
    const body: CreateSandboxBody = compact({
      image: opts.image,
      snapshot: opts.snapshot,
      memory_mib: opts.memoryMib,
      cpus: opts.cpus,
      env: opts.env,
      timeout_s: opts.timeoutMs === undefined ? undefined : toSeconds(opts.timeoutMs),
      labels: opts.labels,
      network: opts.network,
      egress: egressToWire(opts.egress),
      limits: limitsBody(opts.limits),
      idle: idleBody(opts.idle),
      netns: opts.netns,
      forward_ports: opts.forwardPorts,
      cold: opts.cold,
    });
    const wire = await client.transport.json({
      method: 'POST',
      path: '/v1/sandboxes',
      json: body,
      signal: opts.signal,
    });
    return new Sandbox(client, sandboxFromWire(wire));
  }

  /**
   * Attach to an existing sandbox; SandboxNotFoundError when there is none with that id.
   *
   * @example
   * const sbx = await Sandbox.connect('sbx-0123456789ab');
   */
  static async connect(id: string, opts: SandboxOptions = {}): Promise<Sandbox> {
    const client = new Forkd(opts);
    return new Sandbox(client, await getInfo(client, id, opts));
  }

  /**
   * The sandboxes the daemon knows, optionally filtered by state and one label.
   *
   * @example
   * for (const s of await Sandbox.list({ state: 'running' })) console.log(s.id);
   */
  static async list(opts: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const wire = await new Forkd(opts).transport.json<{ sandboxes: unknown[] }>({
      method: 'GET',
      path: '/v1/sandboxes',
      query: { state: opts.state, label: opts.label },
      signal: opts.signal,
    });
    return wire.sandboxes.map((s) => sandboxFromWire(s));
  }

  /**
   * Kill a sandbox by id without connecting first.
   *
   * @example
   * await Sandbox.kill('sbx-0123456789ab');
   */
  static async kill(id: string, opts: SandboxOptions & KillOptions = {}): Promise<void> {
    await deleteSandbox(new Forkd(opts), id, opts);
  }

  /**
   * Make a sandbox expire `timeoutMs` from now (rounded up to whole seconds).
   *
   * @example
   * await Sandbox.setTimeout('sbx-0123456789ab', 30 * 60_000);
   */
  static async setTimeout(
    id: string,
    timeoutMs: number,
    opts: SandboxOptions = {},
  ): Promise<SandboxInfo> {
    return patchTimeout(new Forkd(opts), id, timeoutMs, opts);
  }

  /**
   * A sandbox's VM console log (kernel and agent messages), by id.
   *
   * @example
   * console.log(await Sandbox.logs('sbx-0123456789ab'));
   */
  static async logs(id: string, opts: SandboxOptions = {}): Promise<string> {
    return consoleLog(new Forkd(opts), id, opts);
  }

  /**
   * Branch a sandbox by id without connecting first (see the instance `branch`).
   *
   * @example
   * const { snapshot, pauseMs } = await Sandbox.branch('sbx-0123456789ab', { tag: 'b1' });
   */
  static async branch(
    id: string,
    opts: SandboxOptions & BranchOptions = {},
  ): Promise<BranchResult> {
    return branchSandbox(new Forkd(opts), id, opts);
  }

  /**
   * Fetch its current state into `info`.
   *
   * @example
   * if ((await sbx.refresh()).state === 'dead') console.log(sbx.info.reason);
   */
  async refresh(opts: CallOptions = {}): Promise<SandboxInfo> {
    this.current = await getInfo(this.client, this.id, opts);
    return this.current;
  }

  /**
   * Make it expire `timeoutMs` from now.
   *
   * @example
   * await sbx.setTimeout(10 * 60_000);
   */
  async setTimeout(timeoutMs: number, opts: CallOptions = {}): Promise<void> {
    this.current = await patchTimeout(this.client, this.id, timeoutMs, opts);
  }

  /**
   * Change its resource limits while it runs; limits left out keep their value. A memory
   * limit below what its QEMU uses now is refused (`capacity`), and nothing changes.
   *
   * @example
   * const { limits } = await sbx.setLimits({ cpu: 0.25 });
   */
  async setLimits(limits: LimitsOptions, opts: CallOptions = {}): Promise<SandboxInfo> {
    this.current = await patchSandbox(this.client, this.id, { limits: limitsBody(limits) }, opts);
    return this.current;
  }

  /**
   * Change several things at once, in one request: a refused change (a bad value, a memory
   * limit below what it uses) changes nothing. Each field works as its own setter
   * (`setLimits`, `setIdle`, `setTimeout`); fields left out are not touched.
   *
   * @example
   * await sbx.update({ limits: { cpu: 0.5 }, idle: { pauseAfterMs: 60_000 }, timeoutMs: 3_600_000 });
   */
  async update(changes: SandboxUpdate, opts: CallOptions = {}): Promise<SandboxInfo> {
    const { limits, idle, timeoutMs } = changes;
    const body = compact({
      limits: limitsBody(limits),
      idle: idle === null ? null : idleBody(idle),
      timeout_s: timeoutMs === undefined ? undefined : toSeconds(timeoutMs),
    });
    this.current = await patchSandbox(this.client, this.id, body, opts);
    return this.current;
  }

  /**
   * Change when it pauses itself (docs/idle.md), at once: times left out keep their value
   * (its own, or the daemon's defaults it follows until now), 0 or null is never; `null`
   * for the whole policy makes it follow the daemon's defaults again. A paused sandbox
   * stays paused; the new times count from now. Kept across a daemon restart.
   *
   * @example
   * await sbx.setIdle({ pauseAfterMs: 30_000 }); // paused after 30 s without a request
   * await sbx.setIdle({ pauseAfterMs: 0, hibernateAfterMs: 0 }); // never paused
   * await sbx.setIdle(null); // the daemon's --pause-idle-after / --hibernate-idle-after
   */
  async setIdle(idle: IdleOptions | null, opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.update({ idle }, opts);
  }

  /**
   * Capture it — memory, devices and disk from one instant — into a new snapshot while it
   * keeps running (it is paused for `pauseMs`, tens of milliseconds). With `fork`, children
   * of the new snapshot start in the same call. Its disk is a layer over the snapshot it
   * was forked from: see `snapshot.compact()` for a standalone copy.
   *
   * @example
   * const { snapshot } = await sbx.branch({ tag: 'before-migration' });
   * const { sandboxes } = await snapshot.fork({ n: 3 }); // three tries from the same state
   */
  async branch(opts: BranchOptions = {}): Promise<BranchResult> {
    return branchSandbox(this.client, this.id, opts);
  }

  /**
   * Pause it (docs/idle.md): `paused` (default) stops its VM, so it uses no CPU; `hibernated`
   * also writes it to disk and ends its VM, so it holds no memory; `halted` keeps only its
   * disk (its guest syncs, its VM ends), and its wake is a cold boot on that disk: files
   * stay, processes and memory do not. Any later request (a command, a file, code) wakes it
   * transparently; so does {@link Sandbox.resume}.
   *
   * @example
   * await sbx.pause(); // no CPU until the next request
   * await sbx.pause({ tier: 'hibernated' }); // no memory either
   * await sbx.pause({ tier: 'halted' }); // only the disk: the next request reboots it
   */
  async pause(
    opts: CallOptions & { tier?: 'paused' | 'hibernated' | 'halted' } = {},
  ): Promise<SandboxInfo> {
    this.current = await tierMove(
      this.client,
      this.id,
      'pause',
      opts,
      compact({ tier: opts.tier }),
    );
    return this.current;
  }

  /**
   * Wake it if it is paused (its guest clock is set to now); a running sandbox is left as it is.
   *
   * @example
   * await sbx.resume();
   */
  async resume(opts: CallOptions = {}): Promise<SandboxInfo> {
    this.current = await tierMove(this.client, this.id, 'resume', opts);
    return this.current;
  }

  /**
   * Kill it: its VM ends and its files are gone.
   *
   * @example
   * await sbx.kill();
   */
  async kill(opts: KillOptions = {}): Promise<void> {
    await deleteSandbox(this.client, this.id, opts);
  }

  /**
   * Its VM console log.
   *
   * @example
   * console.log(await sbx.logs());
   */
  async logs(opts: CallOptions = {}): Promise<string> {
    return consoleLog(this.client, this.id, opts);
  }

  /**
   * `await using sbx = …` kills the sandbox when the scope ends; a sandbox already gone
   * is not an error.
   *
   * @example
   * { await using sbx = await Sandbox.create(); await sbx.commands.run('true'); } // killed here
   */
  /**
   * Its network: mode, egress policy, denials counted so far, published ports.
   *
   * @example
   * const { denied } = await sbx.network();
   */
  async network(opts: CallOptions = {}): Promise<SandboxNetwork> {
    const wire = await this.client.transport.json({
      method: 'GET',
      path: `${sandboxPath(this.id)}/network`,
      signal: opts.signal,
    });
    return networkFromWire(wire);
  }

  /**
   * Change its egress policy while it runs (fields left out are kept); new connections
   * follow it at once.
   *
   * @example
   * await sbx.setEgress('none'); // offline from now on
   */
  async setEgress(egress: EgressPolicy, opts: CallOptions = {}): Promise<SandboxNetwork> {
    const wire = await this.client.transport.json({
      method: 'PATCH',
      path: `${sandboxPath(this.id)}/network`,
      json: { egress: egressToWire(egress) },
      signal: opts.signal,
    });
    return networkFromWire(wire);
  }

  /**
   * Publish a guest port on the host's loopback (`hostPort`: a fixed one; default a free one).
   *
   * @example
   * const { hostPort } = await sbx.publishPort(8080);
   */
  async publishPort(
    port: number,
    opts: CallOptions & { hostPort?: number } = {},
  ): Promise<PublishedPort> {
    const wire = await this.client.transport.json({
      method: 'POST',
      path: `${sandboxPath(this.id)}/ports`,
      json: compact({ port, host_port: opts.hostPort }),
      signal: opts.signal,
    });
    return fromWire(PUBLISHED_PORT, wire);
  }

  /**
   * `host:port` on the host where a guest port answers (published on first use).
   *
   * @example
   * const res = await fetch(`http://${await sbx.getHost(8080)}/`);
   */
  async getHost(port: number, opts: CallOptions = {}): Promise<string> {
    const p = await this.publishPort(port, opts);
    return `${p.host}:${p.hostPort}`;
  }

  /**
   * Stop publishing a guest port.
   *
   * @example
   * await sbx.unpublishPort(8080);
   */
  async unpublishPort(port: number, opts: CallOptions = {}): Promise<void> {
    await this.client.transport.bytes({
      method: 'DELETE',
      path: `${sandboxPath(this.id)}/ports/${port}`,
      signal: opts.signal,
    });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill().catch((e: unknown) => {
      if ((e as { code?: string }).code !== 'sandbox_not_found') throw e;
    });
  }
}
