/**
 * The build service (`forkd build`, POST /v1/builds; docs/build.md): a Dockerfile, parsed
 * and planned before any VM starts, runs step by step in one worker sandbox — booted from
 * FROM's image or forked from FROM's snapshot, else forked from the last cached step — and
 * every step that changes the guest ends as a branch of that worker: a snapshot of the
 * running VM, which is what a fork of it would be, so the next step goes on in the same
 * worker. A step whose key (cache.ts) has a snapshot is CACHED. The result is published
 * under TAG with the build's config (env, workdir, user, start command, ports) once every
 * step succeeded; a failure leaves the steps before it cached and nothing under TAG.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, normalize } from 'node:path';
import type { Readable } from 'node:stream';
import type { BuildQueryT } from '../../contract/schemas.js';
import { spawnTool } from '../../util/exec.js';
import { NAME_RULE } from '../../contract/rules.js';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import type { BranchManager } from '../branch/service.js';
import type {
  BuildEvent,
  BuildResult,
  BuildService,
  BuildStepResult,
  Caller,
} from '../contracts.js';
import { getImage, imageEnv, type ImageManager } from '../images/index.js';
import type { SandboxManager } from '../sandboxes/service.js';
import type { SnapshotManifest } from '../snapshots/files.js';
import type { SnapshotManager } from '../snapshots/service.js';
import {
  chainKey,
  KEY_LABEL,
  KIND_LABEL,
  lookup,
  RESULT,
  STEP,
  stepTag,
  unusedSteps,
} from './cache.js';
import { readIgnore, type Rule } from './context.js';
import { lineError, parseDockerfile } from './dockerfile.js';
import { makePlan, type BaseConfig, type BuildConfig, type Plan, type Step } from './plan.js';
import {
  copyInto,
  dropScratch,
  ensureDir,
  prepareCopy,
  runCommand,
  startProcess,
  type PreparedCopy,
  type StepIo,
  type Worker,
} from './steps.js';

export interface BuildRequest {
  /** The Dockerfile's text. */
  dockerfile: string;
  /** The build context: a directory on the daemon's host. */
  context: string;
  tag?: string;
  build_args?: Record<string, string>;
  no_cache?: boolean;
  /** Steps from this one (1-based, after FROM) run again even when cached. */
  no_cache_from?: number;
  memory_mib?: number;
  cpus?: number;
}

export interface BuildServiceOptions {
  paths: Paths;
  sandboxes: SandboxManager;
  snapshots: SnapshotManager;
  branch: BranchManager;
  images: ImageManager;
}

/** Where a build starts: a snapshot, or an image (booted). */
type Base =
  | { kind: 'snapshot'; tag: string; identity: string; config: BaseConfig }
  | { kind: 'image'; name: string; identity: string; config: BaseConfig };

/** The worker sandbox's timeout: a build step may take long (an apt-get under TCG). */
const WORKER_TIMEOUT_S = 6 * 3600;

/** Check a Dockerfile as a build would, without running it (the parse and the plan). */
export function checkDockerfile(text: string, buildArgs: Record<string, string> = {}): Plan {
  return makePlan(parseDockerfile(text), buildArgs);
}

export class BuildManager implements BuildService {
  constructor(private readonly opts: BuildServiceOptions) {}

  /** A build whose context comes as a tar stream (the REST body), unpacked here first. */
  async build(
    query: BuildQueryT,
    context: Readable,
    caller: Caller,
    onEvent?: (e: BuildEvent) => void,
    signal?: AbortSignal,
  ): Promise<BuildResult> {
    const buildArgs = parseBuildArgs(query.build_args);
    const dir = await mkdtemp(join(tmpdir(), 'forkd-build-context-'));
    try {
      await unpackContext(context, dir);
      return await this.buildDir(
        {
          dockerfile: await readDockerfile(dir, query.dockerfile),
          context: dir,
          tag: query.tag,
          build_args: buildArgs,
          no_cache: query.no_cache,
          no_cache_from: query.no_cache_from,
          memory_mib: query.memory_mib,
          cpus: query.cpus,
        },
        caller,
        onEvent,
        signal,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** A build of a context directory on this host. */
  async buildDir(
    req: BuildRequest,
    caller: Caller,
    onEvent: (e: BuildEvent) => void = () => undefined,
    signal?: AbortSignal,
  ): Promise<BuildResult> {
    const started = Date.now();
    const instructions = parseDockerfile(req.dockerfile);
    const args = req.build_args ?? {};
    const dry = makePlan(instructions, args); // every refusal before anything is pulled
    checkTags(req.tag, dry);
    for (const a of dry.unusedArgs)
      onEvent({ type: 'message', message: `build arg ${a} is not declared by any ARG` });
    const base = await this.resolveBase(dry, onEvent, signal);
    const plan = makePlan(instructions, args, base.config);
    const run = new BuildRun(this.opts, req, plan, base, caller, onEvent, signal);
    try {
      const out = await run.steps(await readIgnore(req.context));
      const tag = req.tag ? await run.publishResult(req.tag, plan.config, out) : null;
      return {
        tag,
        snapshot: out.parent,
        config: plan.config,
        steps: out.results,
        duration_ms: Date.now() - started,
      };
    } finally {
      await run.close();
    }
  }

  /** Remove the step snapshots nothing uses (`forkd build prune`); returns their tags. */
  async prune(): Promise<string[]> {
    const { snapshots, sandboxes } = this.opts;
    const manifests = await snapshots.registry.manifests();
    const removed: string[] = [];
    for (const tag of unusedSteps(manifests, (t) => sandboxes.runningOn(t).length > 0)) {
      await snapshots.remove(tag, {}).then(
        () => removed.push(tag),
        () => undefined, // in use since the scan: kept
      );
    }
    return removed;
  }

  /** FROM: a snapshot tag, else a forkd image, else a registry reference pulled as an image. */
  private async resolveBase(
    plan: Plan,
    onEvent: (e: BuildEvent) => void,
    signal?: AbortSignal,
  ): Promise<Base> {
    const ref = plan.from;
    const manifests = await this.opts.snapshots.registry.manifests();
    const snap = manifests.get(ref);
    if (snap) {
      return {
        kind: 'snapshot',
        tag: ref,
        identity: `snapshot:${ref}:${snap.created_at}:${snap.memory_id ?? ''}`,
        config: snap.config ?? {},
      };
    }
    let name = ref;
    if (
      !NAME_RULE.test(ref) ||
      !(await getImage(this.opts.paths, ref).then(
        () => true,
        () => false,
      ))
    ) {
      if (NAME_RULE.test(ref) && !ref.includes('.')) {
        throw lineError(
          plan.fromLine,
          `FROM ${ref}: no snapshot or image of that name here; pull it first (\`forkd image pull REGISTRY/${ref}\`) or name it with its registry (FROM REGISTRY/${ref})`,
        );
      }
      onEvent({ type: 'message', message: `pulling ${ref}` });
      const image = await this.opts.images.pull(
        { reference: ref },
        (p) => onEvent({ type: 'message', message: p.message }),
        signal,
      );
      name = image.name;
    }
    const image = await getImage(this.opts.paths, name);
    const source = image.source as { digest?: string };
    const config: BaseConfig = {
      env: imageEnv(image),
      ...(image.config?.working_dir ? { working_dir: image.config.working_dir } : {}),
      ...(image.config?.user ? { user: image.config.user } : {}),
      ...(image.config?.entrypoint ? { entrypoint: image.config.entrypoint } : {}),
      ...(image.config?.cmd ? { cmd: image.config.cmd } : {}),
    };
    return {
      kind: 'image',
      name,
      identity: `image:${name}:${image.created_at}:${source.digest ?? ''}`,
      config,
    };
  }
}

/** TAG and every forkd:snapshot tag follow the name rule, and no two are the same. */
function checkTags(tag: string | undefined, plan: Plan): void {
  const seen = new Set<string>();
  const check = (t: string, line?: number) => {
    if (!NAME_RULE.test(t)) {
      const msg = `"${t}" is not a valid snapshot tag (1 to 63 characters of a-z, 0-9, ".", "_" and "-")`;
      throw line ? lineError(line, msg) : new ForkdError('bad_request', msg, { field: 'tag' });
    }
    if (seen.has(t))
      throw new ForkdError('bad_request', `the build publishes "${t}" twice`, { field: 'tag' });
    seen.add(t);
  };
  if (tag) check(tag);
  for (const s of plan.steps) if (s.action?.kind === 'publish') check(s.action.tag, s.line);
}

interface StepsOutcome {
  /** The snapshot the state so far is in (null: the base image, nothing ran). */
  parent: string | null;
  key: string;
  results: BuildStepResult[];
}

/** One build under way: its worker sandbox, the chain of keys, the events. */
class BuildRun {
  private worker: { id: string; dirs: Set<string> } | undefined;

  constructor(
    private readonly opts: BuildServiceOptions,
    private readonly req: BuildRequest,
    private readonly plan: Plan,
    private readonly base: Base,
    private readonly caller: Caller,
    private readonly onEvent: (e: BuildEvent) => void,
    private readonly signal?: AbortSignal,
  ) {}

  async steps(rules: Rule[]): Promise<StepsOutcome> {
    const total = this.plan.steps.length;
    let parent: string | null = this.base.kind === 'snapshot' ? this.base.tag : null;
    let key = chainKey('forkd-build-1', this.base.identity, JSON.stringify(this.resources()));
    let missed = false;
    const results: BuildStepResult[] = [];
    for (const step of this.plan.steps) {
      this.signal?.throwIfAborted();
      const t0 = Date.now();
      this.onEvent({ type: 'step', step: step.n, total, line: step.line, instruction: step.text });
      const done = (status: BuildStepResult['status'], snapshot: string | null, disk: number) => {
        const duration_ms = Date.now() - t0;
        this.onEvent({ type: 'step_done', step: step.n, status, duration_ms, snapshot });
        results.push({
          step: step.n,
          line: step.line,
          instruction: step.text,
          status,
          duration_ms,
          snapshot,
          disk_bytes: disk,
        });
      };
      const action = step.action;
      if (!action || action.kind === 'publish') {
        if (action?.kind === 'publish')
          await this.publishResult(action.tag, step.config, { parent, key, results });
        done('config', null, 0);
        continue;
      }
      const copy =
        action.kind === 'copy'
          ? await prepareCopy(this.req.context, rules, step, action)
          : undefined;
      try {
        key = chainKey(key, step.material, copy?.digest ?? '');
        const hit = missed || this.noCache(step) ? undefined : lookup(await this.manifests(), key);
        if (hit) {
          parent = hit;
          await this.close(); // a worker forked for a forkd:snapshot is behind this state
          done('cached', hit, await this.diskBytes(hit));
          continue;
        }
        missed = true;
        await this.runStep(step, parent, copy);
        parent = await this.capture(stepTag(key), { [KIND_LABEL]: STEP, [KEY_LABEL]: key });
        done('ran', parent, await this.diskBytes(parent));
      } finally {
        if (copy) await dropScratch(copy.scratch);
      }
    }
    return { parent, key, results };
  }

  /**
   * Publish the state so far under `tag` with `config`: unchanged when the snapshot there
   * is this build's result already; else the old one is removed (refused while sandboxes
   * or snapshots depend on it) and the worker — or a fork of the last step — branched.
   */
  async publishResult(tag: string, config: BuildConfig, out: StepsOutcome): Promise<string> {
    const key = chainKey(out.key, JSON.stringify(config));
    const manifests = await this.manifests();
    const old = manifests.get(tag);
    if (old?.labels[KEY_LABEL] === key) {
      this.onEvent({ type: 'message', message: `${tag} is up to date` });
      return tag;
    }
    if (old) await this.opts.snapshots.remove(tag, {});
    else if (
      await this.opts.snapshots.get(tag).then(
        () => true,
        () => false,
      )
    ) {
      await this.opts.snapshots.remove(tag, {}); // a failed row of an earlier attempt
    }
    await this.ensureWorker(out.parent);
    const id = this.workerId();
    // The env its forks' commands get: the agent's defaults, which a fork inherits.
    const agent = await this.opts.sandboxes.agentOf(id);
    await agent.configure({ env: config.env });
    await this.capture(tag, { ...config.labels, [KIND_LABEL]: RESULT, [KEY_LABEL]: key }, config);
    this.onEvent({ type: 'message', message: `published ${tag}` });
    return tag;
  }

  async close(): Promise<void> {
    if (this.worker) await this.opts.sandboxes.kill(this.worker.id).catch(() => undefined);
    this.worker = undefined;
  }

  private noCache(step: Step): boolean {
    if (this.req.no_cache) return true;
    return this.req.no_cache_from !== undefined && step.n >= this.req.no_cache_from;
  }

  private resources() {
    return { memory_mib: this.req.memory_mib ?? null, cpus: this.req.cpus ?? null };
  }

  private manifests(): Promise<Map<string, SnapshotManifest>> {
    return this.opts.snapshots.registry.manifests();
  }

  private async diskBytes(tag: string): Promise<number> {
    const s = await this.opts.snapshots.get(tag);
    return s.physical_bytes;
  }

  private workerId(): string {
    return (this.worker as { id: string }).id;
  }

  /** The worker: already running, or forked from `parent`, or booted from the base image. */
  private async ensureWorker(parent: string | null): Promise<void> {
    if (this.worker) return;
    const labels = { [KIND_LABEL]: 'worker' };
    const common = { labels, timeout_s: WORKER_TIMEOUT_S };
    if (parent) {
      this.onEvent({ type: 'message', message: `forking ${parent}` });
      const out = await this.opts.snapshots.fork(
        { snapshot: parent, n: 1, ...common },
        this.caller,
      );
      const child = out.sandboxes[0];
      if (!child)
        throw out.failed[0]?.error ?? new ForkdError('internal', `could not fork ${parent}`);
      this.worker = { id: child.id, dirs: new Set() };
      return;
    }
    const image = this.base.kind === 'image' ? this.base.name : '';
    this.onEvent({ type: 'message', message: `booting image ${image}` });
    const sb = await this.opts.sandboxes.create(
      { image, memory_mib: this.req.memory_mib, cpus: this.req.cpus, ...common },
      this.caller,
    );
    this.worker = { id: sb.id, dirs: new Set() };
  }

  private bound(): Worker {
    const id = this.workerId();
    const s = this.opts.sandboxes;
    return {
      execStream: (req) => s.execStream(id, req),
      writeFile: (path, body, o) => s.writeFile(id, path, body, o),
      makeDir: (path, o) => s.makeDir(id, path, o),
    };
  }

  private async runStep(step: Step, parent: string | null, copy: PreparedCopy | undefined) {
    await this.ensureWorker(parent);
    const w = this.bound();
    const io: StepIo = {
      output: (stream, data) =>
        this.onEvent({ type: 'output', step: step.n, stream, data: data.toString() }),
      signal: this.signal,
    };
    const dirs = (this.worker as { dirs: Set<string> }).dirs;
    if (!dirs.has(step.workdir)) {
      await ensureDir(w, step.workdir, io, step);
      dirs.add(step.workdir);
    }
    const a = step.action;
    if (a?.kind === 'run') await runCommand(w, step, a.argv, io);
    else if (a?.kind === 'copy') await copyInto(w, step, a, copy as PreparedCopy, io);
    else if (a?.kind === 'start') await startProcess(w, step, a, io);
  }

  /** Branch the worker into `tag`; it keeps running for the next step. */
  private async capture(
    tag: string,
    labels: Record<string, string>,
    config?: BuildConfig,
  ): Promise<string> {
    this.signal?.throwIfAborted();
    await this.opts.branch.branch(
      this.workerId(),
      { tag, labels },
      this.caller,
      config ? { config: snapshotConfig(config) } : {},
    );
    return tag;
  }
}

/** What a snapshot records of a build's config (its forks' exec defaults). */
function snapshotConfig(c: BuildConfig): NonNullable<SnapshotManifest['config']> {
  return {
    env: c.env,
    ...(c.working_dir ? { working_dir: c.working_dir } : {}),
    ...(c.user ? { user: c.user } : {}),
    ...(c.entrypoint ? { entrypoint: c.entrypoint } : {}),
    ...(c.cmd ? { cmd: c.cmd } : {}),
    ports: c.ports,
  };
}

/** Read the Dockerfile: its path in the context, `Dockerfile` by default. */
export async function readDockerfile(context: string, file = 'Dockerfile'): Promise<string> {
  const rel = normalize(file).replace(/^\/+/, '');
  if (rel.startsWith('..')) {
    throw new ForkdError('bad_request', `the Dockerfile ${file} is outside the build context`, {
      field: 'dockerfile',
    });
  }
  const path = join(context, rel);
  return readFile(path, 'utf8').catch(() => {
    throw new ForkdError(
      'bad_request',
      `no Dockerfile at ${file} in the build context; name one with -f`,
      { field: 'dockerfile' },
    );
  });
}

/** `build_args` of the query: a JSON object of strings. */
function parseBuildArgs(text: string | undefined): Record<string, string> {
  if (!text) return {};
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    v = undefined;
  }
  const ok =
    typeof v === 'object' &&
    v !== null &&
    !Array.isArray(v) &&
    Object.values(v).every((x) => typeof x === 'string');
  if (!ok)
    throw new ForkdError('bad_request', 'build_args must be a JSON object of strings', {
      field: 'build_args',
    });
  return v as Record<string, string>;
}

/**
 * The context tar into `dir` with the host's tar: members are never owned as in the
 * archive, and GNU tar refuses absolute and `..` names.
 */
async function unpackContext(body: Readable, dir: string): Promise<void> {
  const child = spawnTool('tar', ['-x', '-f', '-', '-C', dir, '--no-same-owner'], {
    stdio: ['pipe', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });
  body.on('error', () => child.kill());
  child.stdin?.on('error', () => undefined);
  body.pipe(child.stdin as NodeJS.WritableStream);
  const code = await exited;
  if (code !== 0) {
    throw new ForkdError('bad_request', `the build context is not a tar stream: ${stderr.trim()}`, {
      field: 'context',
    });
  }
}
