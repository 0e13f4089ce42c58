/**
 * Fake services for the API tests: in-memory sandboxes, files, execs, images and snapshots
 * that behave plausibly (unknown ids → catalog errors, files round-trip bytes, streaming
 * execs and snapshot creates emit with delays, forks make children, branches make chained
 * snapshots, rmi refuses to orphan) and record every call, so a test can prove a rejected
 * request never reached a service. `failWith` makes one method throw. The route table the
 * bad-input and auth tests walk against this seeded state is route-requests.ts.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { ForkdError } from '../../src/errors.js';
import { AUTO_DEFAULTS, resolveLimits } from '../../src/services/limits.js';
import {
  changeIdle,
  idleWire,
  resolveIdle,
  type IdleAfter,
  type IdleRequest,
} from '../../src/services/sandboxes/tiers.js';
import { FakeContexts } from './fake-contexts.js';
import { FakePtys } from './fake-pty.js';
import { RowChanges } from '../../src/store/changes.js';
import { EventFeed } from '../../src/services/events.js';
import { unfinished } from '../../src/services/snapshots/registry.js';
import type {
  AuditEntry,
  BranchOutcome,
  BranchService,
  ExecStream,
  ForkOutcome,
  ImageService,
  NetworkService,
  PackService,
  BuildService,
  SandboxService,
  Services,
  SnapshotService,
} from '../../src/services/contracts.js';
import type {
  BranchRequestT,
  CreateSnapshotT,
  ExecRequestT,
  FileStatT,
  ImageT,
  LineageT,
  LimitsRequestT,
  SandboxNetworkT,
  SandboxT,
  SnapshotT,
} from '../../src/contract/schemas.js';

/** State every fake starts with. */
export const SEED = {
  sandbox: 'sbx-00000000000a',
  exec: 'ex-00000000000a',
  image: 'base',
  file: '/etc/hello',
  fileBytes: Buffer.from('hello\n'),
  snapshot: 'warm',
  /** A snapshot whose memory file is gone: not bootable. */
  brokenSnapshot: 'broken',
};

type ServiceName = 'sandboxes' | 'images' | 'snapshots' | 'branch' | 'contexts';
const SERVICES: ReadonlySet<string> = new Set<ServiceName>([
  'sandboxes',
  'images',
  'snapshots',
  'branch',
  'contexts',
]);

export interface Call {
  service: string;
  method: string;
  args: unknown[];
}

type ExecEvents = ExecStream['events'] extends AsyncIterable<infer E> ? E : never;

interface LiveExec {
  sandbox: string;
  killed?: string;
  stdin: Buffer[];
  eof: boolean;
  /** The command ended: stdin and signals to it are exec_not_found. */
  done?: boolean;
}

/** The users the fake guest's /etc/passwd knows (busybox's with an app user). */
const GUEST_USERS: ReadonlySet<string> = new Set(['root', 'nobody', 'user', 'app']);

/** A registry on loopback's discard port stands for one nothing answers (as in conformance.ts). */
function reachable(reference: string): void {
  const registry = reference.split('/')[0] ?? '';
  if (registry !== '127.0.0.1:9') return;
  throw new ForkdError('registry_unreachable', `cannot reach the registry ${registry}`, {
    registry,
  });
}

const hex12 = (n: number) => n.toString(16).padStart(12, '0');
const b64 = (s: string) => Buffer.from(s).toString('base64');

function sandboxRecord(id: string, image: string, over: Partial<SandboxT> = {}): SandboxT {
  return {
    id,
    state: 'running',
    image,
    snapshot: null,
    parent: null,
    memory_mib: 256,
    cpus: 1,
    labels: {},
    created_at: new Date(0).toISOString(),
    expires_at: null,
    pid: 4242,
    tier: 'running',
    ...over,
  };
}

/** The daemon defaults of the fake: `--hibernate-idle-after 600`, no pause. */
export const FAKE_IDLE_DEFAULTS: IdleAfter = { pauseAfterS: null, hibernateAfterS: 600 };

/** An idle policy as the real service resolves and shows it, over the fake's defaults. */
function fakeIdle(req: IdleRequest | undefined): SandboxT['idle'] {
  return idleWire(resolveIdle(req, FAKE_IDLE_DEFAULTS), FAKE_IDLE_DEFAULTS);
}

/** A changed policy (PATCH; null: the daemon's defaults again) as the real service shows it. */
function fakeIdleChange(now: SandboxT['idle'], req: IdleRequest | null): SandboxT['idle'] {
  const own = now?.source === 'sandbox' ? now : null;
  const next = req === null ? null : changeIdle(own, req, FAKE_IDLE_DEFAULTS);
  return idleWire(next, FAKE_IDLE_DEFAULTS);
}

/** Limits as the real service resolves them (the same checks), enforced by a pretend v1. */
function fakeLimits(
  req: LimitsRequestT | undefined,
  res: { memory_mib: number; cpus: number; limits?: SandboxT['limits'] },
): SandboxT['limits'] {
  const ctx = { memoryMiB: res.memory_mib, cpus: res.cpus, defaults: AUTO_DEFAULTS };
  return { ...resolveLimits(req, { ...ctx, inherited: res.limits }), cgroup: 'v1' };
}

function imageRecord(name: string, from: string): ImageT {
  return {
    name,
    format: 'ext4',
    size_bytes: 64 << 20,
    disk_bytes: 8 << 20,
    created_at: new Date(0).toISOString(),
    source: { kind: 'dir', path: from },
  };
}

const MiB = 1024 * 1024;

function snapshotRecord(tag: string, over: Partial<SnapshotT> = {}): SnapshotT {
  const files = [
    { name: 'memory', size: 256 * MiB, allocated: 61 * MiB, sha256: 'a'.repeat(64) },
    { name: 'vmstate', size: 14_336, allocated: 16_384, sha256: 'b'.repeat(64) },
    { name: 'disk.qcow2', size: 2 * MiB, allocated: 2 * MiB, sha256: 'c'.repeat(64) },
  ];
  return {
    tag,
    state: 'ready',
    bootable: true,
    image: SEED.image,
    parent: null,
    source_sandbox: null,
    memory_mib: 256,
    cpus: 1,
    labels: {},
    created_at: new Date(0).toISOString(),
    kernel: '6.1.0-28-cloud-amd64',
    qemu: '8.2.2',
    files,
    logical_bytes: files.reduce((sum, f) => sum + f.size, 0),
    physical_bytes: files.reduce((sum, f) => sum + f.allocated, 0),
    children_alive: 0,
    pool: { size: 0, ready: 0, prewarm: false, memory_bytes: 0 },
    depth: 0,
    ancestors: [],
    dependents: [],
    memory: fakeMemory(over.parent ?? null, over.parent ? 1 : 0),
    ...over,
  };
}

/** A branch's memory is a diff over its parent's, as the real services store it. */
function fakeMemory(parent: string | null, depth: number): NonNullable<SnapshotT['memory']> {
  return {
    kind: parent ? 'diff' : 'full',
    parent,
    logical_bytes: 256 * MiB,
    stored_bytes: parent ? 6 * MiB : 61 * MiB,
    materialized_bytes: 0,
    depth: parent ? depth : 0,
  };
}

function fileStat(
  path: string,
  kind: FileStatT['kind'],
  size: number,
  owners?: boolean,
): FileStatT {
  const stat = { name: path.split('/').pop() ?? '', kind, size, mode: 0o644, mtime_ms: 0 };
  return owners ? { ...stat, owner: 'root', group: 'root' } : stat;
}

/** A command whose last argument is `exit N` (`sh -c 'exit 3'`) exits N; others 0. */
function exitCodeOf(argv: string[]): number {
  const exit = /^exit (\d+)$/.exec(argv.at(-1) ?? '');
  return exit ? Number(exit[1]) : 0;
}

type LineageNode = LineageT['nodes'][number];

function lineageNode(
  kind: LineageNode['kind'],
  id: string,
  parent: LineageNode['parent'],
  state: string,
  { created_at }: { created_at: string },
): LineageNode {
  return { kind, id, parent, state, created_at };
}

/** The lineage edge to a snapshot when there is one, else to an image. */
function edgeTo(snapshot: string | null, image: string | null): LineageNode['parent'] {
  if (snapshot) return { kind: 'snapshot', id: snapshot };
  return image ? { kind: 'image', id: image } : null;
}

async function drain(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** In-memory services recording their calls. */
export class FakeServices {
  readonly calls: Call[] = [];
  readonly audit: AuditEntry[] = [];
  readonly execs = new Map<string, LiveExec>();
  /** Delay between streamed output events and snapshot progress messages, ms. */
  streamDelayMs = 5;
  /** Fork children (by index) that fail to come up. */
  readonly failingChildren = new Set<number>();
  /** Set when a snapshot create stopped because its progress callback threw (client gone). */
  createAborted = false;
  /** The pre-warmed pool a created snapshot gets (`--default-pool`; 0 here, as in tests). */
  defaultPool = 0;
  readonly services: Services;
  readonly contexts = new FakeContexts((id) => void this.running(id), SEED.sandbox);

  private readonly failures = new Map<string, Error>();
  private sandboxes = new Map<string, SandboxT>();
  private files = new Map<string, Buffer>();
  private dirs = new Set<string>();
  private images = new Map<string, ImageT>();
  private snapshots = new Map<string, SnapshotT>();
  private counter = 0x100;
  /** The snapshot a branched sandbox's disk layers on (removing it folds it into the source). */
  private readonly diskBases = new Map<string, string>();
  /** Timeouts held by a pause (`holdTimeout`): seconds left, given back by the wake. */
  private readonly heldTimeouts = new Map<string, number>();
  /** Terminal sessions (GET /pty), echoing their input. */
  readonly ptys = new FakePtys();
  /** What GET /v1/events streams: tests emit row changes here. */
  readonly changes = new RowChanges();

  constructor() {
    this.reset();
    this.services = {
      contexts: this.recorded('contexts', this.contexts),
      sandboxes: this.recorded('sandboxes', this.sandboxService()),
      images: this.recorded('images', this.imageService()),
      snapshots: this.recorded('snapshots', this.snapshotService()),
      branch: this.recorded('branch', {
        branch: (id, req) => this.branch(id, req),
      } as BranchService),
      audit: { record: (entry) => void this.audit.push(entry) },
      host: {
        qemuVersion: async () => '8.2.2',
        accel: async () => 'tcg',
        sandboxCounts: () => this.counts(),
        sandboxUsage: async () => [],
      },
      network: this.recorded('network', this.networkService()),
      packs: this.recorded('packs', this.packService()),
      builds: this.recorded('builds', this.buildService()),
      events: new EventFeed(this.changes),
    };
    this.services.host.doctor = async () => ({
      ok: true,
      checks: [{ id: 'qemu', status: 'pass', summary: 'QEMU 8.2.2' }],
    });
    this.services.host.benchResults = async () => [
      {
        name: 'fork-2026-12-02.txt',
        modified_at: '2026-12-02T00:00:00.000Z',
        text: 'fork: 90 ms\n',
      },
    ];
  }

  /** Packs over the fake snapshots: an unpack or pull installs a copy of the seed snapshot. */
  private packService(): PackService {
    const install = async (tag: string | undefined, force?: boolean) => {
      const top = tag ?? 'unpacked';
      if (this.snapshots.has(top) && !force) {
        throw new ForkdError('name_taken', `snapshot "${top}" already exists`, { tag: top });
      }
      this.snapshots.set(top, { ...this.snapshot(SEED.snapshot), tag: top });
      const out = { tag: top, installed: [top], reused: [], image: 'busybox' };
      return { ...out, bytes_downloaded: 0, bytes_resumed: 0 };
    };
    return {
      pack: async (tag, file) => {
        this.usable(tag);
        const files = { files: 4, logical_bytes: 4096 };
        return { tag, file, bytes: 1024, chain: [tag], image: 'busybox', ...files };
      },
      // A file under /nonexistent stands for one the daemon host lacks.
      unpack: async (file, opts) => {
        if (file.startsWith('/nonexistent')) {
          throw new ForkdError('bad_request', `no pack file ${file}`, { file });
        }
        return install(opts?.tag, opts?.force);
      },
      push: async (tag, reference) => {
        this.usable(tag);
        reachable(reference);
        const digest = `sha256:${'0'.repeat(64)}`;
        const counts = { blobs: 5, uploaded: 5, skipped: 0, mounted: 0, bytes_uploaded: 4096 };
        return { reference: `${reference}@${digest}`, digest, ...counts };
      },
      pull: async (req) => {
        reachable(req.reference);
        return install(req.tag, req.force);
      },
      cacheInfo: async () => ({
        entries: [
          {
            kind: 'chunk',
            digest: `sha256:${'1'.repeat(64)}`,
            bytes: 2048,
            used_at: '2026-01-01T00:00:00.000Z',
          },
        ],
        bytes: 2048,
        limit_bytes: null,
        hits: 0,
        misses: 1,
        bytes_fetched: 2048,
      }),
      pruneCache: async () => ({ removed: [], bytes: 2048 }),
    };
  }

  /** A build that drains its context and reports one step (the real one: test/e2e/build/). */
  private buildService(): BuildService {
    return {
      // A context that starts `not a tar` stands for one the host's tar refuses.
      build: async (query, context, _caller, onEvent = () => undefined) => {
        const body = await drain(context);
        if (body.subarray(0, 9).toString() === 'not a tar') {
          const message =
            'the build context is not a tar stream: tar: This does not look like a tar archive';
          throw new ForkdError('bad_request', message, { field: 'context' });
        }
        onEvent({ type: 'step', step: 1, total: 1, line: 2, instruction: 'RUN true' });
        onEvent({ type: 'step_done', step: 1, status: 'ran', duration_ms: 1, snapshot: 'b-1' });
        const config = { env: {}, ports: [], labels: {} };
        return { tag: query.tag ?? null, snapshot: 'b-1', config, steps: [], duration_ms: 1 };
      },
      prune: async () => [],
    };
  }

  private guestServer: Promise<number> | undefined;

  /** A stand-in for a guest's HTTP server (the daemon route's target), made on first use. */
  private guestPort(): Promise<number> {
    this.guestServer ??= new Promise((resolve) => {
      const server: Server = createServer((req, res) => res.end(`guest ${req.method} ${req.url}`));
      server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
      server.unref();
    });
    return this.guestServer;
  }

  /** Per sandbox: its egress policy and published ports, as the real network keeps them. */
  private nets = new Map<string, SandboxNetworkT>();

  private net(id: string): SandboxNetworkT {
    this.sandbox(id);
    let n = this.nets.get(id);
    if (!n) {
      const egress = { none: false, allow_internet: true, allow_out: [], deny_out: [] };
      n = { mode: 'nat', isolation: 'netns', address: '10.0.2.15', egress, denied: 0, ports: [] };
      this.nets.set(id, n);
    }
    return n;
  }

  private networkService(): NetworkService {
    return {
      get: async (id) => this.net(id),
      // Merged over the current policy: the lists given replace theirs, `none` cuts all.
      patch: async (id, egress) => {
        const n = this.net(id);
        n.egress =
          egress === 'none' ? { ...n.egress, none: true } : { ...n.egress, none: false, ...egress };
        return n;
      },
      publish: async (id, port, hostPort) => {
        const published = { port, host_port: hostPort ?? 40000 + port, host: '127.0.0.1' };
        const n = this.net(id);
        n.ports = [...n.ports.filter((p) => p.port !== port), published];
        return published;
      },
      unpublish: async (id, port) => {
        const n = this.net(id);
        n.ports = n.ports.filter((p) => p.port !== port);
      },
      deniedCounts: async () => ({}),
      refusedCounts: async () => ({}),
      reach: async (id) => (this.sandbox(id), { host: '127.0.0.1', port: await this.guestPort() }),
    };
  }

  /** Back to the seeded state; forgets calls, audit entries and failures. */
  reset(): void {
    this.ptys.clear();
    this.calls.length = 0;
    this.audit.length = 0;
    this.failures.clear();
    this.sandboxes = new Map([[SEED.sandbox, sandboxRecord(SEED.sandbox, SEED.image)]]);
    this.heldTimeouts.clear();
    this.files = new Map([[`${SEED.sandbox}:${SEED.file}`, SEED.fileBytes]]);
    this.dirs = new Set([`${SEED.sandbox}:/etc`]);
    this.images = new Map([[SEED.image, imageRecord(SEED.image, '/srv/base')]]);
    this.execs.clear();
    this.execs.set(SEED.exec, { sandbox: SEED.sandbox, stdin: [], eof: false });
    this.snapshots = new Map([
      [SEED.snapshot, snapshotRecord(SEED.snapshot, { labels: { team: 'a' } })],
      [
        SEED.brokenSnapshot,
        snapshotRecord(SEED.brokenSnapshot, {
          bootable: false,
          reason: 'memory is missing: /var/lib/forkd/snapshots/broken/memory',
        }),
      ],
    ]);
    this.failingChildren.clear();
    this.diskBases.clear();
    this.nets.clear();
    this.createAborted = false;
    this.defaultPool = 0;
    this.contexts?.reset();
  }

  /** The next calls of `service.method` throw `err`. */
  failWith(service: ServiceName, method: string, err: Error): void {
    this.failures.set(`${service}.${method}`, err);
  }

  /** Calls that reached a service (not the host facts or the audit log). */
  serviceCalls(): Call[] {
    return this.calls.filter((c) => SERVICES.has(c.service));
  }

  private recorded<T extends object>(service: string, impl: T): T {
    return new Proxy(impl, {
      get: (target, method: string) => {
        const fn = (target as Record<string, unknown>)[method];
        if (typeof fn !== 'function') return fn;
        return (...args: unknown[]) => {
          this.calls.push({ service, method, args });
          const failure = this.failures.get(`${service}.${method}`);
          if (failure) return Promise.reject(failure);
          return (fn as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
  }

  private counts(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const s of this.sandboxes.values()) counts[s.state] = (counts[s.state] ?? 0) + 1;
    return counts;
  }

  private sandbox(id: string): SandboxT {
    const s = this.sandboxes.get(id);
    if (!s) throw new ForkdError('sandbox_not_found', `no sandbox ${id}: list them with forkd ps`);
    return s;
  }

  /** A sandbox that runs, woken if paused (a killed one keeps its row, as `stopped`). */
  private running(id: string, wake = true): SandboxT {
    const s = this.sandbox(id);
    if (s.state === 'running' && wake && s.tier !== 'running') {
      s.tier = 'running';
      const held = this.heldTimeouts.get(id);
      this.heldTimeouts.delete(id);
      if (held !== undefined) s.expires_at = new Date(Date.now() + held * 1000).toISOString();
    }
    if (s.state !== 'running') {
      throw new ForkdError(
        'sandbox_not_running',
        `sandbox ${id} has stopped (${s.reason ?? 'killed'})`,
        {
          id,
          state: s.state,
        },
      );
    }
    return s;
  }

  /** A new sandbox row, written (and streamed to GET /v1/events) as the real store does. */
  private added(s: SandboxT): void {
    this.sandboxes.set(s.id, s);
    this.changes.emit({ table: 'sandboxes', key: s.id, op: 'insert', state: 'starting' });
    this.changes.emit({ table: 'sandboxes', key: s.id, op: 'update', state: s.state });
  }

  /** Kill as the real service does: the row stays, `stopped` with reason `killed`. */
  private stop(id: string): void {
    const s = this.sandbox(id);
    if (s.state !== 'running') return;
    s.state = 'stopped';
    s.reason = 'killed';
    s.pid = null;
    this.changes.emit({ table: 'sandboxes', key: id, op: 'update', state: 'stopped' });
    this.diskBases.delete(id);
  }

  /** The daemon's default pool budget, and what the pools set here take of it. */
  private poolBudget() {
    const pools = [...this.snapshots.values()].map((s) => s.pool);
    return {
      vms: 8,
      memory_bytes: 384 * MiB,
      used_vms: pools.reduce((n, p) => n + p.ready, 0),
      used_memory_bytes: pools.reduce((n, p) => n + (p.memory_bytes ?? 0), 0),
    };
  }

  private snapshot(tag: string): SnapshotT {
    const s = this.snapshots.get(tag);
    if (!s)
      throw new ForkdError(
        'snapshot_not_found',
        `no snapshot ${tag}: list them with forkd snapshots`,
      );
    const ancestors = this.ancestors(tag);
    return {
      ...s,
      children_alive: this.children(tag).filter((c) => c.snapshot === tag).length,
      depth: ancestors.length,
      ancestors,
      dependents: this.dependents(tag),
      memory: s.state === 'ready' ? fakeMemory(s.parent, ancestors.length) : undefined,
    };
  }

  /** A snapshot a verb uses: as the real registry, an unfinished one is refused with why. */
  private usable(tag: string): SnapshotT {
    const s = this.snapshot(tag);
    if (s.state !== 'ready') throw unfinished(tag, s.state, s.reason);
    return s;
  }

  /** Add a branch cut off by a daemon stop: listed `failed` with why, no files. */
  addFailedSnapshot(tag: string, reason: string): void {
    const none = { files: [], logical_bytes: 0, physical_bytes: 0 };
    const failed = { state: 'failed' as const, bootable: false, reason, memory: undefined };
    this.snapshots.set(
      tag,
      snapshotRecord(tag, { ...none, ...failed, source_sandbox: SEED.sandbox }),
    );
  }

  /** Parent, grandparent, … of a snapshot. */
  private ancestors(tag: string): string[] {
    const chain: string[] = [];
    for (let p = this.snapshots.get(tag)?.parent; p; p = this.snapshots.get(p)?.parent) {
      chain.push(p);
    }
    return chain;
  }

  /** Every snapshot whose chain includes `tag`. */
  private dependents(tag: string): string[] {
    return [...this.snapshots.keys()].filter((t) => this.ancestors(t).includes(tag));
  }

  /** Running sandboxes that depend on `tag`: forked from it, or branched into it. */
  private children(tag: string): SandboxT[] {
    return [...this.sandboxes.values()].filter(
      (s) => s.state === 'running' && (s.snapshot === tag || this.diskBases.get(s.id) === tag),
    );
  }

  private liveExec(id: string, execId: string): LiveExec {
    const ex = this.execs.get(execId);
    if (!ex || ex.sandbox !== id || ex.done)
      throw new ForkdError('exec_not_found', `no exec ${execId}`);
    return ex;
  }

  private file(id: string, path: string): Buffer {
    this.running(id);
    const data = this.files.get(`${id}:${path}`);
    if (!data) throw new ForkdError('guest_file_not_found', `${path} does not exist`, { path });
    return data;
  }

  /**
   * What a streamed command does in the fake guest, by argv[0]: `lines A B` prints one line per
   * argument with a delay; `sleep` prints ticks until killed; `silent` prints nothing until
   * killed; `crash` fails with a host path
   * in the error after one line; `missing` does not exist; anything else echoes its args
   * (and exits as exitCodeOf says).
   */
  private async *events(req: ExecRequestT, ex: LiveExec): AsyncGenerator<ExecEvents> {
    const [cmd, ...args] = req.argv;
    const out = (s: string) => ({ type: 'stdout' as const, data: Buffer.from(s) });
    if (cmd === 'sleep') {
      for (let i = 0; !ex.killed; i++) {
        yield out(`tick ${i}\n`);
        await sleep(this.streamDelayMs);
      }
    } else if (cmd === 'silent') {
      while (!ex.killed) await sleep(this.streamDelayMs);
    } else if (cmd === 'cat' && args.length === 0) {
      while (!ex.eof && !ex.killed) await sleep(this.streamDelayMs);
      if (!ex.killed) yield { type: 'stdout' as const, data: Buffer.concat(ex.stdin) };
    } else if (cmd === 'crash') {
      yield out('about to crash\n');
      throw new Error('agent socket /var/lib/forkd/sandboxes/sbx-1/agent.sock closed');
    } else {
      for (const arg of cmd === 'lines' ? args : [args.join(' ')]) {
        await sleep(this.streamDelayMs);
        yield out(`${arg}\n`);
      }
    }
    ex.done = true; // as the real one: a finished command takes no more stdin or signals
    yield {
      type: 'exit',
      exit_code: ex.killed ? null : exitCodeOf(req.argv),
      signal: ex.killed ?? null,
      timed_out: false,
      duration_ms: 1,
    };
  }

  private sandboxService(): SandboxService {
    return {
      create: async (req) => {
        if (req.image && !this.images.has(req.image)) {
          throw new ForkdError('image_not_found', `no image ${req.image}`);
        }
        const id = `sbx-${hex12(this.counter++)}`;
        const res = { memory_mib: req.memory_mib ?? 256, cpus: req.cpus ?? 1 };
        const s = sandboxRecord(id, req.image ?? SEED.image, {
          ...res,
          labels: req.labels ?? {},
          expires_at: req.timeout_s
            ? new Date(Date.now() + req.timeout_s * 1000).toISOString()
            : null,
          limits: fakeLimits(req.limits, res),
          idle: fakeIdle(req.idle),
        });
        this.added(s);
        return s;
      },
      list: async ({ state, label }) =>
        [...this.sandboxes.values()].filter(
          (s) => (!state || s.state === state) && (!label || s.labels[label.key] === label.value),
        ),
      get: async (id) => this.sandbox(id),
      extend: async (id, timeoutS) => {
        const s = this.running(id, false);
        if (this.heldTimeouts.has(id)) {
          this.heldTimeouts.set(id, timeoutS); // what its wake gives back, as the real one
          return s;
        }
        s.expires_at = new Date(Date.now() + timeoutS * 1000).toISOString();
        return s;
      },
      setLimits: async (id, req) => {
        const s = this.running(id);
        s.limits = fakeLimits(req, s);
        return s;
      },
      // As the real one: everything checked before anything changes.
      update: async (id, { timeout_s: timeoutS, limits, idle }) => {
        // A change does not wake it; an empty one answers even a stopped sandbox as it is.
        const empty = timeoutS === undefined && limits === undefined && idle === undefined;
        const s = empty ? this.sandbox(id) : this.running(id, false);
        const policy = idle === undefined ? undefined : fakeIdleChange(s.idle, idle);
        if (limits) s.limits = fakeLimits(limits, s);
        if (policy) s.idle = policy;
        if (timeoutS !== undefined && this.heldTimeouts.has(id)) {
          this.heldTimeouts.set(id, timeoutS);
        } else if (timeoutS !== undefined) {
          s.expires_at = new Date(Date.now() + timeoutS * 1000).toISOString();
        }
        return s;
      },
      kill: async (id) => this.stop(id),
      // Echoes its arguments (and exits as exitCodeOf says).
      exec: async (id, req) => {
        this.running(id);
        if (req.argv[0] === 'missing') throw new ForkdError('command_not_found', 'no such command');
        const code = exitCodeOf(req.argv);
        return {
          exit_code: code,
          signal: null,
          timed_out: false,
          duration_ms: 1,
          stdout: b64(`${req.argv.slice(1).join(' ')}\n`),
          stderr: code ? b64(`failing with ${code}\n`) : '',
        };
      },
      execStream: async (id, req) => {
        this.running(id);
        if (req.argv[0] === 'missing') throw new ForkdError('command_not_found', 'no such command');
        const execId = `ex-${hex12(this.counter++)}`;
        const ex: LiveExec = { sandbox: id, stdin: [], eof: false };
        this.execs.set(execId, ex);
        return { execId, pid: Promise.resolve(100), events: this.events(req, ex) };
      },
      writeStdin: async (id, execId, data, eof) => {
        const ex = this.liveExec(id, execId);
        ex.stdin.push(data);
        ex.eof ||= eof;
      },
      killExec: async (id, execId, signal) => {
        this.liveExec(id, execId).killed = signal;
      },
      readFile: async (id, path) => Readable.from([this.file(id, path)]),
      writeFile: async (id, path, body) => {
        this.running(id);
        const data = await drain(body);
        this.files.set(`${id}:${path}`, data);
        return data.length;
      },
      statFile: async (id, path, opts) => {
        if (this.dirs.has(`${id}:${path}`)) return fileStat(path, 'dir', 4096, opts?.owners);
        return fileStat(path, 'file', this.file(id, path).length, opts?.owners);
      },
      // Files and directories right under `dir`, as the agent lists them.
      listFiles: async (id, dir, opts) => {
        this.running(id);
        const prefix = `${id}:${dir.replace(/\/$/, '')}/`;
        const direct = (key: string) =>
          key.startsWith(prefix) && !key.slice(prefix.length).includes('/');
        const dirs = [...this.dirs].filter(direct);
        return [
          ...dirs.map((key) => fileStat(key.slice(id.length + 1), 'dir', 4096, opts?.owners)),
          ...[...this.files]
            .filter(([key]) => direct(key))
            .map(([key, data]) =>
              fileStat(key.slice(id.length + 1), 'file', data.length, opts?.owners),
            ),
        ];
      },
      // With `parents`, every missing directory on the way (as mkdir -p).
      makeDir: async (id, path, opts) => {
        this.running(id);
        const parts = path.split('/').filter(Boolean);
        const upTo = opts.parents ? 1 : parts.length;
        for (let n = upTo; n <= parts.length; n++) {
          this.dirs.add(`${id}:/${parts.slice(0, n).join('/')}`);
        }
      },
      guestUser: async (id, user) => {
        this.running(id);
        const name = user ?? 'root';
        if (!GUEST_USERS.has(name)) {
          throw new ForkdError('bad_request', `user ${name}: not in the guest's /etc/passwd`, {
            field: 'user',
            reason: 'no such user',
          });
        }
        const home = name === 'root' ? '/root' : `/home/${name}`;
        return {
          name,
          uid: name === 'root' ? 0 : 1000,
          gid: name === 'root' ? 0 : 1000,
          home,
          cwd: home,
        };
      },
      // A directory goes with everything under it (`recursive`, as rm -r).
      removeFile: async (id, path, opts) => {
        const key = `${id}:${path}`;
        if (!this.dirs.has(key) || !opts.recursive) {
          this.file(id, path);
          this.files.delete(key);
          return;
        }
        const under = (k: string) => k === key || k.startsWith(`${key}/`);
        for (const k of [...this.files.keys()]) if (under(k)) this.files.delete(k);
        for (const k of [...this.dirs]) if (under(k)) this.dirs.delete(k);
      },
      consoleLog: async (id) => {
        this.running(id);
        return '[    0.000000] Linux version 6.1\nforkd-agent: ready\n';
      },
      pty: async (id, req, onData) => {
        this.running(id);
        return this.ptys.open(id, req, onData);
      },
      ptySessions: async (id) => {
        this.running(id);
        return this.ptys.list(id);
      },
      pause: async (id, opts) => {
        const s = this.sandbox(id);
        if (s.state !== 'running') this.running(id); // sandbox_not_running, as the real one
        if (opts?.holdTimeout && s.expires_at !== null) {
          const left = Math.ceil((Date.parse(s.expires_at) - Date.now()) / 1000);
          this.heldTimeouts.set(id, Math.max(1, left));
          s.expires_at = null;
        }
        s.tier = opts?.tier ?? 'paused';
        return s;
      },
      resume: async (id) => this.running(id),
    };
  }

  /**
   * What a create does in the fake, by its warm commands: `false` fails after its progress
   * message, `crash` fails with a host path in the error, `forever` reports progress until
   * the callback throws (the client left); an image `slow` waits before any progress.
   */
  private async createSnapshot(
    req: CreateSnapshotT,
    say: (message: string) => void = () => undefined,
  ): Promise<SnapshotT> {
    if (this.snapshots.has(req.tag))
      throw new ForkdError('name_taken', `snapshot ${req.tag} exists`);
    const image = req.image ?? SEED.image;
    if (!this.images.has(image)) throw new ForkdError('image_not_found', `no image ${image}`);
    const step = async (message: string) => {
      await sleep(this.streamDelayMs);
      say(message);
    };
    await step(`booting ${image}`);
    for (const cmd of req.warm ?? []) await this.warm(cmd, step);
    await step('capturing');
    const snapshot = snapshotRecord(req.tag, {
      image,
      memory_mib: req.memory_mib ?? 256,
      cpus: req.cpus ?? 1,
      labels: req.labels ?? {},
      // As the real create: the default pool is asked for and fills in the background.
      pool: { size: this.defaultPool, ready: 0, prewarm: this.defaultPool > 0, memory_bytes: 0 },
    });
    this.snapshots.set(req.tag, snapshot);
    return snapshot;
  }

  private async warm(cmd: string, step: (message: string) => Promise<void>): Promise<void> {
    await step(`warm: ${cmd}`);
    if (cmd === 'false') throw new ForkdError('guest_error', 'warm command failed: exit 1');
    if (cmd === 'crash') throw new Error('qmp /var/lib/forkd/snapshots/.staging/qmp.sock closed');
    try {
      while (cmd === 'forever') await step('still warming');
    } catch (e) {
      this.createAborted = true;
      throw e;
    }
  }

  private forkChildren(
    tag: string,
    n: number,
    req: { labels?: Record<string, string>; limits?: LimitsRequestT; idle?: IdleRequest },
  ) {
    const source = this.usable(tag);
    if (!source.bootable) {
      throw new ForkdError('snapshot_not_bootable', `snapshot ${tag} is not bootable`, {
        file: 'memory',
      });
    }
    const result: ForkOutcome = { sandboxes: [], failed: [] };
    const limits = fakeLimits(req.limits, source);
    const idle = fakeIdle(req.idle); // bad_request before any child, as the real fork
    // As the real fork does: every child of one request carries its id (the caller's, or new).
    const labels = { 'forkd.request': `req-${hex12(this.counter)}`, ...req.labels };
    for (let index = 0; index < n; index++) {
      if (this.failingChildren.has(index)) {
        const message = `child ${index} did not come up: see /var/lib/forkd/sandboxes/x/console.log`;
        result.failed.push({ index, error: new ForkdError('boot_failed', message) });
        continue;
      }
      const id = `sbx-${hex12(this.counter++)}`;
      const child = sandboxRecord(id, source.image ?? SEED.image, {
        snapshot: tag,
        labels,
        limits,
        idle,
      });
      this.added(child);
      result.sandboxes.push(child);
    }
    return result;
  }

  /**
   * Refuses to orphan: snapshots built on `tag` need `cascade` (which removes them too), and
   * sandboxes running from any removed snapshot need `force` (which kills them).
   */
  private removeSnapshot(tag: string, { force = false, cascade = false }): void {
    const dependents = this.snapshot(tag).dependents;
    if (dependents.length && !cascade) {
      throw new ForkdError(
        'snapshot_in_use',
        `snapshots are built on ${tag}: ${dependents.join(', ')}; remove them or pass cascade`,
        { tag, snapshots: dependents },
      );
    }
    const removed = [...dependents, tag];
    // Only sandboxes forked from them; a source that merely layers on one gets it folded in.
    const forked = removed.flatMap((t) => this.children(t).filter((c) => c.snapshot === t));
    if (forked.length && !force) {
      throw new ForkdError('snapshot_in_use', `${forked.length} sandboxes run from ${tag}`, {
        tag,
        sandboxes: forked.map((c) => c.id),
      });
    }
    for (const c of forked) this.stop(c.id);
    for (const t of removed) {
      const parent = this.snapshot(t).parent;
      for (const [id, base] of this.diskBases) {
        if (base !== t) continue;
        if (parent) this.diskBases.set(id, parent);
        else this.diskBases.delete(id);
      }
      this.snapshots.delete(t);
    }
  }

  private checkFreeTag(tag: string): void {
    if (this.snapshots.has(tag)) throw new ForkdError('name_taken', `snapshot ${tag} exists`);
  }

  /**
   * A branch of a running sandbox: a snapshot chained on the one the sandbox's disk layers
   * on (standalone for a booted one), `writing` with no_wait, and `fork` children of it;
   * from then on the source's disk layers on the branch (removing it folds it in).
   */
  private async branch(id: string, req: BranchRequestT): Promise<BranchOutcome> {
    const source = this.running(id);
    const tag = req.tag ?? `${id}.${hex12(this.counter++).slice(-4)}`;
    this.checkFreeTag(tag);
    await sleep(this.streamDelayMs);
    this.snapshots.set(
      tag,
      snapshotRecord(tag, {
        state: req.no_wait ? 'writing' : 'ready',
        image: source.image,
        parent: this.diskBases.get(id) ?? source.snapshot,
        source_sandbox: id,
        memory_mib: source.memory_mib,
        cpus: source.cpus,
        labels: req.labels ?? {},
      }),
    );
    const result: BranchOutcome = {
      snapshot: this.snapshot(tag),
      mode: req.mode ?? 'copy',
      pause_ms: 42.5,
      captured_bytes: 3 * MiB,
      timings: { copy_base_ms: 120, pause_ms: 42.5, checksum_ms: 300 },
    };
    this.diskBases.set(id, tag);
    if (req.fork) result.children = this.forkChildren(tag, req.fork, req);
    return result;
  }

  /** A standalone copy of `tag` under `to`: no parent, one layer. */
  private compact(tag: string, to: string): SnapshotT {
    const source = this.usable(tag);
    this.checkFreeTag(to);
    const { labels, image, memory_mib, cpus } = source;
    this.snapshots.set(to, snapshotRecord(to, { labels, image, memory_mib, cpus }));
    return this.snapshot(to);
  }

  /** Images, then snapshots, then sandboxes; with `tag`, that snapshot's subtree only. */
  private lineage(tag?: string): LineageT {
    const nodes: LineageNode[] = [
      ...[...this.images.values()].map((i) => lineageNode('image', i.name, null, 'ready', i)),
      ...[...this.snapshots.values()].map((s) =>
        lineageNode('snapshot', s.tag, edgeTo(s.parent, s.image), s.state, s),
      ),
      ...[...this.sandboxes.values()].map((s) =>
        lineageNode('sandbox', s.id, edgeTo(s.snapshot, s.image), s.state, s),
      ),
    ];
    if (tag === undefined) return { nodes };
    const within = new Set([tag, ...this.snapshot(tag).dependents]);
    const inside = (n: LineageNode) =>
      n.kind === 'snapshot'
        ? within.has(n.id)
        : n.parent?.kind === 'snapshot' && within.has(n.parent.id);
    return { nodes: nodes.filter(inside) };
  }

  private snapshotService(): SnapshotService {
    return {
      create: (req, _caller, onProgress) => this.createSnapshot(req, onProgress),
      list: async () => [...this.snapshots.keys()].map((tag) => this.snapshot(tag)),
      get: async (tag) => this.snapshot(tag),
      verify: async (tag) => {
        const s = this.usable(tag);
        if (s.bootable) return { ok: true, problems: [] };
        return { ok: false, problems: [{ file: 'memory', problem: 'missing' }] };
      },
      remove: async (tag, opts) => this.removeSnapshot(tag, opts),
      compact: async (tag, to) => this.compact(tag, to),
      lineage: async (tag) => this.lineage(tag),
      setPool: async (tag, size, opts) => {
        // Each waiting VM takes what an idle child does (docs/snapshots.md: 13.5–18 MiB).
        const memory_bytes = size * 16 * MiB;
        const pool = { size, ready: size, prewarm: opts?.prewarm ?? false, memory_bytes, held: 0 };
        this.snapshots.set(tag, { ...this.usable(tag), pool });
        // The budget as the pools stand with this one set (the daemon's defaults, never full).
        Object.assign(pool, { budget: this.poolBudget() });
        return pool;
      },
      poolBudget: () => this.poolBudget(),
      fork: async (req) => {
        const result = this.forkChildren(req.snapshot, req.n, req);
        if (!req.all_or_nothing || result.failed.length === 0) return result;
        for (const c of result.sandboxes) this.stop(c.id);
        return { sandboxes: [], failed: result.failed };
      },
    };
  }

  private imageService(): ImageService {
    return {
      list: async () => [...this.images.values()],
      // As the real one, the tree is checked first; a path under /nonexistent stands for a missing one.
      create: async (req) => {
        if (req.from_dir.startsWith('/nonexistent')) {
          const message = `${req.from_dir} is not a directory: pass the root of the tree to pack`;
          throw new ForkdError('bad_request', message, { dir: req.from_dir });
        }
        if (this.images.has(req.name) && !req.force) {
          throw new ForkdError('name_taken', `image ${req.name} exists: pass force`);
        }
        const image = imageRecord(req.name, req.from_dir);
        this.images.set(req.name, image);
        return image;
      },
      remove: async (name) => {
        if (!this.images.delete(name)) throw new ForkdError('image_not_found', `no image ${name}`);
      },
      get: async (name) => {
        const image = this.images.get(name);
        if (!image) throw new ForkdError('image_not_found', `no image ${name}`);
        return image;
      },
      pull: async (req, onProgress) => this.pullImage(req.reference, req.name, onProgress),
      // A path under /nonexistent stands for one the daemon host lacks.
      import: async (req, onProgress) => {
        if (req.path.startsWith('/nonexistent')) {
          const message = `${req.path} does not exist: pass an OCI layout directory or an image tar`;
          throw new ForkdError('bad_request', message, { path: req.path });
        }
        return this.pullImage(req.path, req.name, onProgress);
      },
      captureBootSnapshot: async (name, req, onProgress) => {
        const image = this.images.get(name);
        if (!image) throw new ForkdError('image_not_found', `no image ${name}`);
        onProgress?.({ message: `capturing the boot snapshot of image ${name}` });
        const size = { memory_mib: req.memory_mib ?? 256, cpus: req.cpus ?? 1 };
        const boot = { tag: 'boot-0123456789abcdef', ...size, network: req.network ?? 'nat' };
        image.boot_snapshots = [{ ...boot, physical_bytes: 1 << 20, current: true }];
        return image;
      },
      prune: async () => ({ blobs: 0, bytes: 0, images: [] }),
      login: async (req) => {
        reachable(req.registry);
        if (req.password !== 'secret') {
          throw new ForkdError('registry_unauthorized', `${req.registry} refused the credentials`);
        }
      },
      logout: async () => undefined,
    };
  }

  /** A pull (or import) that fails for a reference containing `missing`, like a 404 tag. */
  private async pullImage(
    reference: string,
    name: string | undefined,
    onProgress?: (e: { message: string; layer?: string; current?: number; total?: number }) => void,
  ): Promise<ImageT> {
    onProgress?.({ message: `resolving ${reference}` });
    reachable(reference);
    if (reference.includes('missing')) {
      throw new ForkdError('reference_not_found', `no ${reference}: check the repository and tag`);
    }
    onProgress?.({
      message: 'layer 1/1',
      layer: `sha256:${'a'.repeat(64)}`,
      current: 10,
      total: 10,
    });
    const image: ImageT = {
      ...imageRecord(name ?? 'pulled', '/srv/pulled'),
      source: { kind: 'oci', reference, digest: `sha256:${'b'.repeat(64)}` },
      config: { env: ['PATH=/bin'], working_dir: '/app', cmd: ['sh'] },
    };
    this.images.set(image.name, image);
    return image;
  }
}
