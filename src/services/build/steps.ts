/**
 * What one build step does inside its VM (the worker sandbox): a RUN's command with its
 * output streamed, a COPY/ADD's files written through the agent (an ADD'ed local archive
 * extracted on the host first), a forkd:start process left running and its readiness
 * waited for. A step that fails throws `build_failed` with its output and exit code.
 */
import { createReadStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { ExecRequestT } from '../../contract/schemas.js';
import { ForkdError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { shQuote } from '../../util/shell-words.js';
import type { ExecStream } from '../contracts.js';
import { portCheck } from '../snapshots/create.js';
import {
  contextError,
  digestEntries,
  isArchive,
  resolveCopy,
  type CopyEntry,
  type Rule,
} from './context.js';
import type { Action, Step } from './plan.js';

/** The worker sandbox as a step sees it (the sandbox service's methods, bound to one id). */
export interface Worker {
  execStream(req: ExecRequestT): Promise<ExecStream>;
  writeFile(
    path: string,
    body: Readable,
    opts: { mode?: number; parents?: boolean },
  ): Promise<number>;
  makeDir(path: string, opts: { parents?: boolean; mode?: number }): Promise<void>;
}

export interface StepIo {
  /** A chunk of the step's output, as the guest wrote it. */
  output(stream: 'stdout' | 'stderr', data: Buffer): void;
  signal?: AbortSignal;
}

const OUTPUT_TAIL = 4000;
const READY_POLL_MS = 250;
/** Paths per chown/chmod command (the agent takes at most 4096 argv entries). */
const PATHS_PER_COMMAND = 1000;

/** A COPY/ADD resolved against the context: what to write and its digest. */
export interface PreparedCopy {
  entries: CopyEntry[];
  digest: string;
  /** Host dirs made for extracted archives, removed once the step is done. */
  scratch: string[];
}

/** Resolve a COPY/ADD's sources (before the cache lookup: the digest is part of the key). */
export async function prepareCopy(
  context: string,
  rules: Rule[],
  step: Step,
  action: Extract<Action, { kind: 'copy' }>,
): Promise<PreparedCopy> {
  const where = contextError(step.line, step.text);
  const scratch: string[] = [];
  try {
    const { entries } = await resolveCopy(context, rules, action.sources, action.dest, where);
    const out: CopyEntry[] = [];
    for (const e of entries) {
      if (action.add && e.type === 'file' && (await isArchive(e.host))) {
        const dir = await mkdtemp(join(tmpdir(), 'forkd-build-add-'));
        scratch.push(dir);
        await run('tar', ['-x', '-f', e.host, '-C', dir, '--no-same-owner']).catch(
          (err: unknown) => {
            throw where(
              `ADD could not extract ${e.host.slice(context.length + 1)}: ${String(err)}`,
            );
          },
        );
        const dest = action.dest.endsWith('/') ? action.dest : `${action.dest}/`;
        out.push(...(await resolveCopy(dir, [], ['.'], dest, where)).entries);
      } else out.push(e);
    }
    return { entries: out, digest: await digestEntries(out), scratch };
  } catch (e) {
    await dropScratch(scratch);
    throw e;
  }
}

export async function dropScratch(dirs: string[]): Promise<void> {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
}

/** The user a command runs as: a `user:group` runs as the user (the agent takes one). */
function execUser(user: string | undefined): string | undefined {
  return user?.split(':')[0] || undefined;
}

/** Run a step's command (RUN) to its end, streaming its output; non-zero is build_failed. */
export async function runCommand(w: Worker, step: Step, argv: string[], io: StepIo): Promise<void> {
  const r = await execStreamed(
    w,
    { argv, env: step.env, cwd: step.workdir, user: execUser(step.user) },
    io,
  );
  if (r.code !== 0)
    throw stepFailed(
      step,
      r.code === null ? `signal ${r.signal}` : `exit code ${r.code}`,
      r.tail,
      r.code,
    );
}

/** Make a directory as root (WORKDIR's, which Docker creates). */
export async function ensureDir(w: Worker, dir: string, io: StepIo, step: Step): Promise<void> {
  if (dir === '/') return;
  const r = await execStreamed(w, { argv: ['mkdir', '-p', dir], user: 'root' }, io);
  if (r.code !== 0) throw stepFailed(step, `could not create WORKDIR ${dir}`, r.tail, r.code);
}

async function execStreamed(
  w: Worker,
  req: ExecRequestT,
  io: StepIo,
): Promise<{ code: number | null; signal: string | null; tail: string }> {
  const stream = await w.execStream({ ...req, stream: true });
  let tail = '';
  for await (const ev of stream.events) {
    io.signal?.throwIfAborted();
    if (ev.type === 'exit') return { code: ev.exit_code, signal: ev.signal, tail };
    io.output(ev.type, ev.data);
    tail = (tail + ev.data.toString()).slice(-OUTPUT_TAIL);
  }
  return { code: null, signal: 'lost', tail };
}

/** Write a COPY/ADD's entries into the guest, then its --chown and links. */
export async function copyInto(
  w: Worker,
  step: Step,
  action: Extract<Action, { kind: 'copy' }>,
  copy: PreparedCopy,
  io: StepIo,
): Promise<void> {
  const links: string[] = [];
  for (const e of copy.entries) {
    io.signal?.throwIfAborted();
    const mode = action.chmod ?? e.mode;
    if (e.type === 'dir') await w.makeDir(e.guest, { parents: true, mode });
    else if (e.type === 'file') {
      await w.writeFile(e.guest, createReadStream(e.host), { mode, parents: true });
    } else links.push(`ln -sfn ${shQuote(e.target ?? '')} ${shQuote(e.guest)}`);
  }
  const script = [...links];
  if (action.chown) {
    const paths = copy.entries.map((e) => e.guest);
    for (let k = 0; k < paths.length; k += PATHS_PER_COMMAND) {
      const chunk = paths
        .slice(k, k + PATHS_PER_COMMAND)
        .map(shQuote)
        .join(' ');
      script.push(`chown -h ${shQuote(action.chown)} -- ${chunk}`);
    }
  }
  if (script.length === 0) return;
  const r = await execStreamed(
    w,
    { argv: ['/bin/sh', '-ec', script.join('\n')], user: 'root' },
    io,
  );
  if (r.code !== 0)
    throw stepFailed(step, `--chown or a link failed (exit code ${r.code})`, r.tail, r.code);
}

/**
 * forkd:start: the process is started detached (its output to a log file), so it keeps
 * running in the step's snapshot and in every fork; then its readiness is polled.
 */
export async function startProcess(
  w: Worker,
  step: Step,
  action: Extract<Action, { kind: 'start' }>,
  io: StepIo,
): Promise<void> {
  // In /tmp: writable by the step's USER, whoever that is.
  const log = `/tmp/forkd-start-${step.n}.log`;
  const line = action.argv.map(shQuote).join(' ');
  const as = { env: step.env, cwd: step.workdir, user: execUser(step.user) };
  const started = await execStreamed(
    w,
    { argv: ['/bin/sh', '-c', `(${line}) </dev/null >${log} 2>&1 &`], ...as },
    io,
  );
  if (started.code !== 0)
    throw stepFailed(step, 'the process could not be started', started.tail, started.code);
  const check = readyCheck(action);
  if (!check) return;
  const deadline = Date.now() + action.timeoutS * 1000;
  const quiet: StepIo = { output: () => undefined, signal: io.signal };
  for (;;) {
    const r = await execStreamed(w, { argv: ['/bin/sh', '-c', check], ...as }, quiet);
    if (r.code === 0) return;
    if (Date.now() > deadline) {
      const out = await execStreamed(w, { argv: ['tail', '-c', '2000', log], user: 'root' }, quiet);
      throw stepFailed(
        step,
        `not ready after ${action.timeoutS} s (${check} kept failing); the process's output follows`,
        out.tail,
        null,
      );
    }
    await new Promise((r) => setTimeout(r, READY_POLL_MS));
  }
}

function readyCheck(action: Extract<Action, { kind: 'start' }>): string | null {
  const r = action.ready;
  if (r.kind === 'port') return portCheck(r.port);
  if (r.kind === 'file') return `test -e ${shQuote(r.path)}`;
  if (r.kind === 'cmd') return r.cmd;
  return null;
}

/** The catalog error of a step that failed: its line, text, exit code and output. */
export function stepFailed(step: Step, why: string, output: string, exitCode: number | null) {
  return new ForkdError(
    'build_failed',
    `step ${step.n} (Dockerfile line ${step.line}) failed: ${why}: ${step.text}${output ? `\n${output}` : ''}`,
    { step: step.n, line: step.line, instruction: step.text, exit_code: exitCode, output },
  );
}
