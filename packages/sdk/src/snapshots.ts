/**
 * `Snapshot`: make one (boot an image, warm it up, capture it), find and list them, fork
 * sandboxes from one — each starts already warm and shares the snapshot's memory
 * copy-on-write — and compact or remove a chain. (Branching a running sandbox into a
 * snapshot is `sandbox.branch()`, branch.ts.) Static calls take the client options; a Snapshot object keeps its client,
 * so its instance calls take only a signal.
 */
import { Forkd, type CallOptions } from './client.js';
import { errorFromResponse, InternalError, type ForkdError } from './errors.js';
import { ndjson } from './ndjson.js';
import { sandboxOf, type Sandbox, type SandboxOptions } from './sandbox.js';
import type {
  EgressPolicy,
  IdleOptions,
  LimitsOptions,
  NetworkMode,
  PoolInfo,
  SnapshotInfo,
  VerifyReport,
} from './types.js';
import {
  compact,
  egressToWire,
  fromWire,
  idleBody,
  limitsBody,
  poolFromWire,
  sandboxFromWire,
  snapshotFromWire,
  toSeconds,
  VERIFY_PROBLEM,
  VERIFY_RESULT,
  type CreateSandboxBody,
  type CreateSnapshotBody,
  type ForkResultWire,
  type SnapshotEvent,
  type WireError,
} from './wire.js';

/**
 * How to make a snapshot: the parent VM to boot, how to warm it up, when it is ready.
 *
 * @example
 * const opts: SnapshotCreateOptions = {
 *   tag: 'py', image: 'debian-py', memoryMib: 512,
 *   warm: ['python3 -c "import numpy"'], start: ['python3 -m http.server 8000'], waitPort: 8000,
 *   onProgress: (m) => console.error(m),
 * };
 */
export interface SnapshotCreateOptions extends SandboxOptions {
  /** Its name: a-z, 0-9, `.`, `_`, `-`. */
  tag: string;
  /** The image the parent boots from (default: the daemon's). */
  image?: string;
  memoryMib?: number;
  cpus?: number;
  /** Environment of the warm-up and start commands. */
  env?: Record<string, string>;
  /** Commands run to completion, in order (`sh -c`); a failure aborts the create. */
  warm?: string[];
  /** Commands started in the background that keep running inside the snapshot. */
  start?: string[];
  /** A command retried until it exits 0 before the capture. */
  waitFor?: string;
  /** A guest TCP port that must listen before the capture. */
  waitPort?: number;
  /** How long `waitFor` / `waitPort` may take (rounded up to whole seconds). */
  waitTimeoutMs?: number;
  labels?: Record<string, string>;
  /** The parent's (and so its forks') NIC: `nat` (default) or `none`. */
  network?: NetworkMode;
  /** The policy its forks inherit. */
  egress?: EgressPolicy;
  /** Progress messages as the daemon reports them (the create then streams). */
  onProgress?(message: string): void;
  /** Python code contexts started in the parent; every fork inherits them warm. */
  contexts?: string[];
  /** Code run in the first context before the capture (imports to keep warm). */
  eval?: string[];
  /** Commands every child runs right after its restore, before it is handed out. */
  onFork?: string[];
  /** The user its forks' commands and files default to (default: the image's User, else root). */
  user?: string;
  /** Where its forks' commands start by default (default: the image's WorkingDir, else the user's home). */
  workdir?: string;
}

/**
 * How to fork a snapshot.
 *
 * @example
 * const { sandboxes } = await snapshot.fork({ n: 10, labels: { run: '7' }, timeoutMs: 600_000 });
 */
export interface ForkOptions extends CallOptions {
  /** How many sandboxes (1–100). */
  n: number;
  labels?: Record<string, string>;
  /** Environment every command in the children sees. */
  envs?: Record<string, string>;
  /** Kill each child after this long (rounded up to whole seconds). */
  timeoutMs?: number;
  /** If any child fails, the daemon kills the healthy ones too. */
  allOrNothing?: boolean;
  /** Merged over the snapshot's policy: e.g. `'none'` for offline children. */
  egress?: EgressPolicy;
  /** Override the limits the children inherit from the snapshot (docs/limits.md). */
  limits?: LimitsOptions;
  /** The children's idle policy; not inherited, left out: the daemon's (docs/idle.md). */
  idle?: IdleOptions;
}

/**
 * A child that did not come up: its place in the fork and its typed error.
 *
 * @example
 * for (const { index, error } of result.failed) console.error(index, error.code, error.message);
 */
export interface ForkFailure {
  index: number;
  error: ForkdError;
}

/**
 * What a fork made: the children that came up, and those that did not.
 *
 * @example
 * const { sandboxes, failed }: ForkResult = await snapshot.fork({ n: 5 });
 */
export interface ForkResult {
  sandboxes: Sandbox[];
  failed: ForkFailure[];
}

/**
 * How to remove a snapshot.
 *
 * @example
 * await snapshot.remove({ force: true }); // kills the sandboxes forked from it first
 * await snapshot.remove({ cascade: true, force: true }); // and every snapshot built on it
 */
export interface SnapshotRemoveOptions extends CallOptions {
  /** Kill the sandboxes forked from it first (else SnapshotInUseError while any run). */
  force?: boolean;
  /**
   * Also remove every snapshot built on it (its `dependents`); else SnapshotInUseError
   * while there are any. Sandboxes running from those need `force` too.
   */
  cascade?: boolean;
}

function snapshotPath(tag: string): string {
  return `/v1/snapshots/${encodeURIComponent(tag)}`;
}

function createBody(opts: SnapshotCreateOptions): CreateSnapshotBody {
  return compact({
    tag: opts.tag,
    image: opts.image,
    memory_mib: opts.memoryMib,
    cpus: opts.cpus,
    env: opts.env,
    warm: opts.warm,
    start: opts.start,
    wait_for: opts.waitFor,
    wait_port: opts.waitPort,
    wait_timeout_s: opts.waitTimeoutMs === undefined ? undefined : toSeconds(opts.waitTimeoutMs),
    labels: opts.labels,
    network: opts.network,
    egress: egressToWire(opts.egress),
    contexts: opts.contexts,
    eval: opts.eval,
    on_fork: opts.onFork,
    user: opts.user,
    workdir: opts.workdir,
  });
}

/** The typed error of a wire error object (an `error` event, a failed child). */
function typedError(error: WireError): ForkdError {
  return errorFromResponse(500, { error });
}

/**
 * A wire ForkResult → live Sandboxes and typed failures. For the SDK's own modules (a
 * branch's children): not exported from the package.
 *
 * @example
 * const { sandboxes, failed } = forkResultOf(client, wire.children);
 */
export function forkResultOf(client: Forkd, wire: ForkResultWire): ForkResult {
  return {
    sandboxes: wire.sandboxes.map((s) => sandboxOf(client, sandboxFromWire(s))),
    failed: wire.failed.map(({ index, error }) => ({ index, error: typedError(error) })),
  };
}

/** Wraps a snapshot the daemon reported; set by the class, whose constructor is private. */
let wrap: (client: Forkd, info: SnapshotInfo) => Snapshot;

/**
 * The Snapshot object of a snapshot the daemon just reported (a branch's). For the SDK's
 * own modules: not exported from the package.
 *
 * @example
 * const snapshot = snapshotOf(client, snapshotFromWire(wire.snapshot));
 */
export function snapshotOf(client: Forkd, info: SnapshotInfo): Snapshot {
  return wrap(client, info);
}

/** A create that streams: progress to the callback, then the snapshot or its error. */
async function createStreamed(
  client: Forkd,
  body: CreateSnapshotBody,
  opts: SnapshotCreateOptions,
): Promise<SnapshotInfo> {
  const res = await client.transport.send({
    method: 'POST',
    path: '/v1/snapshots',
    json: { ...body, stream: true },
    signal: opts.signal,
  });
  for await (const ev of ndjson<SnapshotEvent>(client.transport.body(res, opts.signal))) {
    if (ev.type === 'progress') opts.onProgress?.(ev.message);
    else if (ev.type === 'done') return snapshotFromWire(ev.snapshot);
    else if (ev.type === 'error') throw typedError(ev.error);
  }
  throw new InternalError(
    `the create of snapshot ${body.tag} ended without its outcome; see \`forkd snapshots\``,
  );
}

/**
 * A snapshot: a paused, warmed-up VM on disk under a tag, to fork sandboxes from.
 *
 * @example
 * const snap = await Snapshot.create({ tag: 'warm', image: 'busybox', warm: ['echo ready > /tmp/x'] });
 * const { sandboxes } = await snap.fork({ n: 3 });
 */
export class Snapshot {
  static {
    wrap = (client, info) => new Snapshot(client, info);
  }

  private current: SnapshotInfo;

  private constructor(
    private readonly client: Forkd,
    info: SnapshotInfo,
  ) {
    this.current = info;
  }

  /**
   * Its tag.
   *
   * @example
   * console.log(snapshot.tag);
   */
  get tag(): string {
    return this.current.tag;
  }

  /**
   * What was last heard of it (at create, get or refresh).
   *
   * @example
   * console.log(snapshot.info.physicalBytes, snapshot.info.childrenAlive);
   */
  get info(): SnapshotInfo {
    return this.current;
  }

  /**
   * Boot a parent from an image, warm it up, capture it under `tag`. Takes seconds to
   * minutes; with `onProgress` the daemon reports each step as it goes. Aborting `signal`
   * makes the daemon stop and clean up: nothing is left under the tag.
   *
   * @example
   * const snap = await Snapshot.create({
   *   tag: 'py', image: 'debian-py', warm: ['python3 -c "import numpy"'],
   *   onProgress: (m) => console.error(m),
   * });
   */
  static async create(opts: SnapshotCreateOptions): Promise<Snapshot> {
    const client = new Forkd(opts);
    const body = createBody(opts);
    if (opts.onProgress) return new Snapshot(client, await createStreamed(client, body, opts));
    const wire = await client.transport.json({
      method: 'POST',
      path: '/v1/snapshots',
      json: body,
      signal: opts.signal,
    });
    return new Snapshot(client, snapshotFromWire(wire));
  }

  /**
   * The snapshot with that tag; SnapshotNotFoundError when there is none.
   *
   * @example
   * const snap = await Snapshot.get('py');
   */
  static async get(tag: string, opts: SandboxOptions = {}): Promise<Snapshot> {
    const client = new Forkd(opts);
    return new Snapshot(client, await getInfo(client, tag, opts));
  }

  /**
   * Every snapshot the daemon has.
   *
   * @example
   * for (const s of await Snapshot.list()) console.log(s.tag, s.childrenAlive);
   */
  static async list(opts: SandboxOptions = {}): Promise<SnapshotInfo[]> {
    const wire = await new Forkd(opts).transport.json<{ snapshots: unknown[] }>({
      method: 'GET',
      path: '/v1/snapshots',
      signal: opts.signal,
    });
    return wire.snapshots.map(snapshotFromWire);
  }

  /**
   * Remove a snapshot by tag without getting it first.
   *
   * @example
   * await Snapshot.remove('py', { force: true });
   */
  static async remove(
    tag: string,
    opts: SandboxOptions & SnapshotRemoveOptions = {},
  ): Promise<void> {
    await removeSnapshot(new Forkd(opts), tag, opts);
  }

  /**
   * Fetch its current state into `info`.
   *
   * @example
   * console.log((await snapshot.refresh()).pool.ready);
   */
  async refresh(opts: CallOptions = {}): Promise<SnapshotInfo> {
    this.current = await getInfo(this.client, this.tag, opts);
    return this.current;
  }

  /**
   * Fork `n` sandboxes from it. A child that fails does not fail the others: look at
   * `failed` (with `allOrNothing`, the daemon then kills the healthy ones too).
   *
   * @example
   * const { sandboxes, failed } = await snapshot.fork({ n: 10 });
   * await Promise.all(sandboxes.map((s) => s.commands.run('python3 job.py')));
   */
  async fork(opts: ForkOptions): Promise<ForkResult> {
    return forkFrom(this.client, this.tag, opts);
  }

  /**
   * Fork from a snapshot named by tag or by OCI reference (`REGISTRY/REPO:TAG`): the
   * daemon pulls a reference it lacks first (concurrent forks share that pull), later
   * forks of it start at local speed.
   *
   * @example
   * const { sandboxes } = await Snapshot.fork('127.0.0.1:5000/team/env:warm', { n: 2 });
   */
  static async fork(
    tagOrReference: string,
    opts: ForkOptions & SandboxOptions,
  ): Promise<ForkResult> {
    return forkFrom(new Forkd(opts), tagOrReference, opts);
  }

  /**
   * Fork `n` sandboxes, all or none: when any child fails the daemon kills the others and
   * this throws the first failure's error.
   *
   * @example
   * const workers = await snapshot.forkAll(8);
   */
  async forkAll(n: number, opts: Omit<ForkOptions, 'n' | 'allOrNothing'> = {}): Promise<Sandbox[]> {
    const { sandboxes, failed } = await this.fork({ ...opts, n, allOrNothing: true });
    if (failed[0]) throw failed[0].error;
    return sandboxes;
  }

  /**
   * Re-check its files against the checksums of its manifest.
   *
   * @example
   * const { ok, problems } = await snapshot.verify();
   */
  async verify(opts: CallOptions = {}): Promise<VerifyReport> {
    const wire = await this.client.transport.json({
      method: 'POST',
      path: `${snapshotPath(this.tag)}/verify`,
      signal: opts.signal,
    });
    const report = fromWire(VERIFY_RESULT, wire);
    return { ...report, problems: report.problems.map((p) => fromWire(VERIFY_PROBLEM, p)) };
  }

  /**
   * Keep `size` VMMs pre-started for it, so forks skip QEMU's start (0: no pool). With
   * `prewarm` each is also restored, run once and paused, so a fork costs a resume (the
   * guest has then run ~0.1 s past the snapshot).
   *
   * @example
   * await snapshot.setPool(4);
   * await snapshot.setPool(4, { prewarm: true });
   */
  async setPool(size: number, opts: CallOptions & { prewarm?: boolean } = {}): Promise<PoolInfo> {
    const wire = await this.client.transport.json({
      method: 'PUT',
      path: `${snapshotPath(this.tag)}/pool`,
      json: opts.prewarm === undefined ? { size } : { size, prewarm: opts.prewarm },
      signal: opts.signal,
    });
    const pool = poolFromWire(wire);
    this.current = { ...this.current, pool };
    return pool;
  }

  /**
   * Flatten it (memory and disk, over all its ancestors) into a standalone snapshot under
   * `to`: the new one has no parent, so it outlives this one's chain. This one stays.
   *
   * @example
   * const flat = await snapshot.compact('step-3-flat');
   * await snapshot.remove({ cascade: true }); // the chain can go; flat still forks
   */
  async compact(to: string, opts: CallOptions = {}): Promise<Snapshot> {
    const wire = await this.client.transport.json({
      method: 'POST',
      path: `${snapshotPath(this.tag)}/compact`,
      json: { to },
      signal: opts.signal,
    });
    return new Snapshot(this.client, snapshotFromWire(wire));
  }

  /**
   * Remove it; SnapshotInUseError while sandboxes forked from it run, unless `force`, and
   * while snapshots are built on it, unless `cascade`.
   *
   * @example
   * await snapshot.remove();
   */
  async remove(opts: SnapshotRemoveOptions = {}): Promise<void> {
    await removeSnapshot(this.client, this.tag, opts);
  }
}

// ---- requests shared by the static calls and their instance twins ----------------------

/** POST /v1/sandboxes with `snapshot`: the fork shared by Snapshot.fork and its instance twin. */
async function forkFrom(client: Forkd, snapshot: string, opts: ForkOptions): Promise<ForkResult> {
  const body: CreateSandboxBody = compact({
    snapshot,
    n: opts.n,
    labels: opts.labels,
    env: opts.envs,
    timeout_s: opts.timeoutMs === undefined ? undefined : toSeconds(opts.timeoutMs),
    all_or_nothing: opts.allOrNothing,
    egress: egressToWire(opts.egress),
    limits: limitsBody(opts.limits),
    idle: idleBody(opts.idle),
  });
  const wire = await client.transport.json<ForkResultWire>({
    method: 'POST',
    path: '/v1/sandboxes',
    json: body,
    signal: opts.signal,
  });
  return forkResultOf(client, wire);
}

async function getInfo(client: Forkd, tag: string, opts: CallOptions): Promise<SnapshotInfo> {
  const wire = await client.transport.json({
    method: 'GET',
    path: snapshotPath(tag),
    signal: opts.signal,
  });
  return snapshotFromWire(wire);
}

async function removeSnapshot(
  client: Forkd,
  tag: string,
  opts: SnapshotRemoveOptions,
): Promise<void> {
  await client.transport.bytes({
    method: 'DELETE',
    path: snapshotPath(tag),
    query: { force: opts.force || undefined, cascade: opts.cascade || undefined },
    signal: opts.signal,
  });
}
