/**
 * E2B template builds as the listener keeps them: the templates requested (name, size),
 * the COPY archives uploaded (on disk, by the SDK's content hash, so a second build finds
 * them `present`), and each build's status and log as the SDK polls them. A build runs in
 * forkd's build service: the translated Dockerfile (template-steps.ts) and the archives
 * unpacked under `<hash>/` make its context, sent as the tar stream the service takes.
 * Build state lives in the listener's memory (a daemon restart forgets builds, not files).
 */
import { randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { access, mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ForkdError, isForkdError } from '../../errors.js';
import type { BuildEvent, Caller, Services } from '../../services/contracts.js';
import { run, spawnTool } from '../../util/exec.js';
import { translate, type E2bTemplateStart, type TranslatedBuild } from './template-steps.js';

export type BuildStatus = 'waiting' | 'building' | 'ready' | 'error';

export interface LogEntry {
  timestamp: string;
  level: 'info' | 'error';
  message: string;
  step?: string;
}

/** A template requested by `POST /v3/templates`: its name is the forkd snapshot tag. */
export interface TemplateRequest {
  name: string;
  cpus?: number;
  memory_mib?: number;
}

interface Build {
  id: string;
  template: TemplateRequest;
  status: BuildStatus;
  log: LogEntry[];
  reason?: { message: string; step?: string };
  finishedAt?: number;
}

/** Finished builds kept for status polls; older ones are forgotten first. */
const KEEP_FINISHED = 100;
/** A log line longer than this is cut (a step's output arrives in chunks anyway). */
const MAX_LINE = 4096;

export class TemplateBuilds {
  private readonly templates = new Map<string, TemplateRequest>();
  private readonly builds = new Map<string, Build>();

  constructor(
    private readonly services: Services,
    /** Where uploaded archives are kept, `<hash>.tar`. */
    private readonly filesDir: string,
  ) {}

  /** `POST /v3/templates`: a template (by name) and a build of it, waiting for its steps. */
  request(template: TemplateRequest): { templateID: string; buildID: string } {
    if (!this.services.builds) {
      throw new ForkdError(
        'not_found',
        'this daemon offers no template builds (it has no build service)',
      );
    }
    this.templates.set(template.name, template);
    const id = randomUUID();
    this.builds.set(id, { id, template, status: 'waiting', log: [] });
    this.forgetOld();
    return { templateID: template.name, buildID: id };
  }

  private template(id: string): TemplateRequest {
    const t = this.templates.get(id);
    if (!t) throw new ForkdError('not_found', `no template ${id.slice(0, 64)} was requested here`);
    return t;
  }

  build(templateID: string, buildID: string): Build {
    const b = this.builds.get(buildID);
    if (!b || b.template.name !== templateID) {
      throw new ForkdError(
        'not_found',
        `no build ${buildID.slice(0, 64)} of template ${templateID.slice(0, 64)}`,
      );
    }
    return b;
  }

  private filePath(hash: string): string {
    return join(this.filesDir, `${hash}.tar`);
  }

  async present(templateID: string, hash: string): Promise<boolean> {
    this.template(templateID);
    return access(this.filePath(hash)).then(
      () => true,
      () => false,
    );
  }

  /** Store an uploaded archive under its hash: written aside, renamed into place whole. */
  async store(hash: string, body: Readable): Promise<void> {
    await mkdir(this.filesDir, { recursive: true, mode: 0o700 });
    const part = `${this.filePath(hash)}.${randomUUID()}.part`;
    try {
      await pipeline(body, createWriteStream(part, { mode: 0o600 }));
      await rename(part, this.filePath(hash));
    } finally {
      await rm(part, { force: true });
    }
  }

  /**
   * `POST /v2/templates/:id/builds/:build`: check and translate now (a refusal is the
   * answer), then run in the background; the SDK follows it by polling the status.
   */
  async start(templateID: string, buildID: string, req: E2bTemplateStart, caller: Caller) {
    const b = this.build(templateID, buildID);
    if (b.status !== 'waiting') {
      throw new ForkdError('name_taken', `build ${buildID} was started already`);
    }
    const baseUser = req.fromTemplate
      ? await this.services.snapshots.get(req.fromTemplate).then(
          (s) => s.user ?? 'root',
          () => 'root',
        )
      : 'root';
    const plan = translate(req, baseUser);
    const missing: string[] = [];
    for (const h of plan.hashes) if (!(await this.present(templateID, h))) missing.push(h);
    if (missing.length) {
      throw new ForkdError(
        'bad_request',
        `the files of COPY ${missing.map((h) => h.slice(0, 12)).join(', ')} were not uploaded: upload them first (GET /templates/${templateID}/files/HASH)`,
      );
    }
    b.status = 'building';
    void this.run(b, plan, caller);
  }

  private async run(b: Build, plan: TranslatedBuild, caller: Caller): Promise<void> {
    const say = (message: string, level: LogEntry['level'] = 'info', step?: string) =>
      b.log.push({
        timestamp: new Date().toISOString(),
        level,
        message: message.slice(0, MAX_LINE),
        ...(step ? { step } : {}),
      });
    let current = 0;
    const onEvent = (e: BuildEvent) => {
      if (e.type === 'step') current = e.step;
      const line = eventLine(e);
      if (line !== undefined) say(line, 'info', 'step' in e ? plan.e2bStep(e.step) : undefined);
    };
    const dir = await mkdtemp(join(tmpdir(), 'forkd-e2b-build-'));
    try {
      await this.context(dir, plan);
      const result = await this.services.builds?.build(
        {
          tag: b.template.name,
          no_cache: plan.noCache,
          ...(plan.noCacheFrom ? { no_cache_from: plan.noCacheFrom } : {}),
          ...(b.template.cpus ? { cpus: b.template.cpus } : {}),
          ...(b.template.memory_mib ? { memory_mib: b.template.memory_mib } : {}),
        },
        packDir(dir),
        caller,
        onEvent,
      );
      const cached = result?.steps.filter((s) => s.status === 'cached').length ?? 0;
      say(`built ${b.template.name}: ${result?.steps.length ?? 0} steps, ${cached} CACHED`);
      b.status = 'ready';
    } catch (err) {
      const message = isForkdError(err) ? err.message : String(err);
      const step = current ? plan.e2bStep(current) : 'base';
      say(message, 'error', step);
      b.reason = { message, step };
      b.status = 'error';
    } finally {
      b.finishedAt = Date.now();
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** The build context: the Dockerfile, each archive unpacked under its hash. */
  private async context(dir: string, plan: TranslatedBuild): Promise<void> {
    await writeFile(join(dir, 'Dockerfile'), plan.dockerfile);
    for (const hash of plan.hashes) {
      const into = join(dir, hash);
      await mkdir(into);
      await run('tar', ['-x', '-f', this.filePath(hash), '-C', into, '--no-same-owner']).catch(
        (err: unknown) => {
          const why = isForkdError(err) ? err.message : String(err);
          throw new ForkdError(
            'bad_request',
            `the upload ${hash.slice(0, 12)} is not a tar archive: ${why}`,
          );
        },
      );
    }
  }

  private forgetOld(): void {
    const done = [...this.builds.values()].filter((b) => b.finishedAt !== undefined);
    done.sort((x, y) => (x.finishedAt as number) - (y.finishedAt as number));
    for (const b of done.slice(0, Math.max(0, done.length - KEEP_FINISHED)))
      this.builds.delete(b.id);
  }
}

/** A build event as one line of E2B's log (the SDK prints them as they come). */
function eventLine(e: BuildEvent): string | undefined {
  switch (e.type) {
    case 'step':
      return `[${e.step}/${e.total}] ${e.instruction}`;
    case 'output':
      return e.data.replace(/\n$/, '') || undefined;
    case 'step_done':
      if (e.status === 'cached') return `CACHED step ${e.step}`;
      return e.status === 'ran'
        ? `step ${e.step} done in ${(e.duration_ms / 1000).toFixed(1)} s`
        : undefined;
    case 'message':
      return e.message;
  }
}

/**
 * A directory as the tar stream the build service takes. Read from at once: a child's
 * stdout that nobody reads when the child exits is drained and its data dropped (Node's
 * flushStdio), and a small context's tar can end before the service starts reading.
 */
function packDir(dir: string): Readable {
  const child = spawnTool('tar', ['-c', '-f', '-', '-C', dir, '.'], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const out = new PassThrough();
  child.on('error', (e) => out.destroy(e));
  return (child.stdout as Readable).pipe(out);
}
