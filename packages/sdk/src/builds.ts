/**
 * Builds (docs/build.md): a Dockerfile and its build context into a snapshot, every step run
 * in a forkd VM and cached as a snapshot. The context goes up as a tar stream; the build's
 * events come back as they happen.
 */
import type { Readable } from 'node:stream';
import type { CallOptions } from './client.js';
import { errorFromResponse, InternalError } from './errors.js';
import type { Transport } from './http.js';
import { ndjson } from './ndjson.js';

/**
 * What to build.
 *
 * @example
 * const opts: BuildOptions = { tag: 'web', buildArgs: { VERSION: '2' } };
 */
export interface BuildOptions extends CallOptions {
  /** The snapshot tag of the result (left out: only the cached steps are made). */
  tag?: string;
  /** The Dockerfile's path inside the context (default `Dockerfile`). */
  dockerfile?: string;
  buildArgs?: Record<string, string>;
  /** Run every step again. */
  noCache?: boolean;
  /** Run this step (1-based, after FROM) and the later ones again. */
  noCacheFrom?: number;
  memoryMib?: number;
  cpus?: number;
  /** Each event as the daemon reports it (steps, their output, their end). */
  onEvent?(e: BuildEvent): void;
}

/**
 * One event of a build.
 *
 * @example
 * const show = (e: BuildEvent) => e.type === 'output' && process.stdout.write(e.data);
 */
export type BuildEvent =
  | { type: 'step'; step: number; total: number; line: number; instruction: string }
  | { type: 'output'; step: number; stream: 'stdout' | 'stderr'; data: string }
  | {
      type: 'step_done';
      step: number;
      status: 'cached' | 'ran' | 'config';
      durationMs: number;
      snapshot: string | null;
    }
  | { type: 'message'; message: string };

/**
 * A finished build.
 *
 * @example
 * const cached = result.steps.filter((s) => s.status === 'cached').length;
 */
export interface BuildResult {
  tag: string | null;
  /** The last step's snapshot. */
  snapshot: string | null;
  config: {
    env: Record<string, string>;
    workingDir?: string;
    user?: string;
    entrypoint?: string[];
    cmd?: string[];
    ports: number[];
    labels: Record<string, string>;
  };
  steps: {
    step: number;
    line: number;
    instruction: string;
    status: 'cached' | 'ran' | 'config';
    durationMs: number;
    snapshot: string | null;
    diskBytes: number;
  }[];
  durationMs: number;
}

interface WireResult {
  tag: string | null;
  snapshot: string | null;
  config: BuildResult['config'] & { working_dir?: string };
  steps: (Omit<BuildResult['steps'][number], 'durationMs' | 'diskBytes'> & {
    duration_ms: number;
    disk_bytes: number;
  })[];
  duration_ms: number;
}

/**
 * The daemon's builds.
 *
 * @example
 * const tar = spawn('tar', ['-c', '-C', 'app', '.']).stdout;
 * const r = await forkd.builds.build(tar, { tag: 'web', onEvent: console.log });
 */
export class Builds {
  constructor(private readonly transport: Transport) {}

  /**
   * Build from a context given as a tar stream (the Dockerfile inside it).
   *
   * @example
   * const result = await forkd.builds.build(fs.createReadStream('ctx.tar'), { tag: 'web' });
   */
  async build(context: Readable | Uint8Array, opts: BuildOptions = {}): Promise<BuildResult> {
    const res = await this.transport.send({
      method: 'POST',
      path: '/v1/builds',
      query: {
        tag: opts.tag,
        dockerfile: opts.dockerfile,
        build_args: opts.buildArgs ? JSON.stringify(opts.buildArgs) : undefined,
        no_cache: opts.noCache,
        no_cache_from: opts.noCacheFrom,
        memory_mib: opts.memoryMib,
        cpus: opts.cpus,
      },
      body: context,
      signal: opts.signal,
    });
    for await (const ev of ndjson<Record<string, unknown>>(this.transport.body(res, opts.signal))) {
      if (ev.type === 'done') return resultFromWire(ev.result as WireResult);
      if (ev.type === 'error') throw errorFromResponse(500, { error: ev.error });
      opts.onEvent?.(eventFromWire(ev));
    }
    throw new InternalError('the build ended without its outcome; see `forkd snapshots --all`');
  }

  /**
   * Remove the step snapshots no sandbox and no other snapshot uses; returns their tags.
   *
   * @example
   * const { length } = await forkd.builds.prune();
   */
  async prune(opts: CallOptions = {}): Promise<string[]> {
    const r = await this.transport.json<{ removed: string[] }>({
      method: 'POST',
      path: '/v1/builds/prune',
      signal: opts.signal,
    });
    return r.removed;
  }
}

function eventFromWire(ev: Record<string, unknown>): BuildEvent {
  if (ev.type === 'step_done') {
    const { duration_ms, ...rest } = ev as { duration_ms: number };
    return { ...rest, durationMs: duration_ms } as BuildEvent;
  }
  return ev as BuildEvent;
}

function resultFromWire(r: WireResult): BuildResult {
  const { working_dir, ...config } = r.config;
  return {
    tag: r.tag,
    snapshot: r.snapshot,
    config: { ...config, ...(working_dir ? { workingDir: working_dir } : {}) },
    steps: r.steps.map(({ duration_ms, disk_bytes, ...s }) => ({
      ...s,
      durationMs: duration_ms,
      diskBytes: disk_bytes,
    })),
    durationMs: r.duration_ms,
  };
}
