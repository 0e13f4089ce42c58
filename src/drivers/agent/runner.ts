/**
 * The code-context runners in the guest (packages/python/forkd/_runner.py for Python,
 * agent/node-runner.cjs for Node; one protocol): one interpreter process per context, each
 * serving a unix socket under /run/forkd/contexts. The host reaches a context by exec'ing
 * the agent's own static binary in `--connect` mode (/proc/1/exe: a client that starts in
 * milliseconds, where a Python client would cost hundreds under TCG): one JSON request on
 * its stdin, NDJSON events on its stdout. Contexts are managed with small shell commands;
 * their state lives in the guest only, so forks and branches carry them along with the
 * processes.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { repoRoot } from '../../config.js';
import { ForkdError } from '../../errors.js';
import type { AgentClient, ExecHandle } from './client.js';

export type ContextLanguage = 'python' | 'node';

interface StartRequest {
  name: string;
  language: ContextLanguage;
  cwd: string;
  env: Record<string, string>;
}

/**
 * Per language: where its runner is uploaded, its source in this checkout, its interpreter,
 * and the command that starts a context's server and exits once it serves (127: no
 * interpreter in the image).
 */
const RUNNERS: Record<
  ContextLanguage,
  {
    path: string;
    source: string[];
    interpreter: string;
    debian: string;
    starter(req: StartRequest): string[];
  }
> = {
  python: {
    path: '/run/forkd/runner.py',
    source: ['packages', 'python', 'forkd', '_runner.py'],
    interpreter: 'python3',
    debian: 'python3',
    // The runner forks its own detached server.
    starter: (req) => [
      'python3',
      '/run/forkd/runner.py',
      'start',
      req.name,
      req.cwd,
      JSON.stringify(req.env),
    ],
  },
  node: {
    path: '/run/forkd/node-runner.cjs',
    source: ['agent', 'node-runner.cjs'],
    interpreter: 'node',
    debian: 'nodejs',
    starter: (req) => ['sh', '-c', nodeStarter('/run/forkd/node-runner.cjs', req)],
  },
};

/**
 * Node cannot fork, and a Node process spawning the server would cost a second interpreter
 * start (seconds under TCG), so a shell starts it: in its own session (the group a remove
 * kills), in its cwd with its env, output to the context's log; ready once the server wrote
 * "1" on fd 3, a FIFO read here (EOF first: it died, and its log says why).
 */
function nodeStarter(runner: string, req: StartRequest): string {
  const log = shellQuote(contextFile(req.name, 'log'));
  const ready = shellQuote(`${CONTEXTS_DIR}/.${req.name}.ready`);
  const cwd = shellQuote(req.cwd);
  const env = Object.entries(req.env).map(([k, v]) => shellQuote(`${k}=${v}`));
  const args = [runner, 'serve', req.name, req.cwd, JSON.stringify(req.env)].map(shellQuote);
  return [
    'command -v node >/dev/null || exit 127',
    'command -v setsid >/dev/null || { echo "setsid is not in the image" >&2; exit 1; }',
    `mkdir -p ${CONTEXTS_DIR} && cd ${cwd} 2>/dev/null || { echo "No such file or directory: "${cwd} >&2; exit 1; }`,
    `(umask 077; : >>${log}) && rm -f ${ready} && mkfifo ${ready} || exit 1`,
    `env ${env.join(' ')} setsid node ${args.join(' ')} </dev/null >>${log} 2>&1 3>${ready} &`,
    `ok=$(cat ${ready}); rm -f ${ready}`,
    `[ "$ok" = 1 ] || { tail -c 2000 ${log} >&2; exit 1; }`,
  ].join('\n');
}
export const CONTEXTS_DIR = '/run/forkd/contexts';
/** The agent's own binary, reachable after the switch to the image root. */
const AGENT_SELF = '/proc/1/exe';
/** Past the runner's own timeout, the pipe is cut this much later (a wedged interpreter). */
const PIPE_GRACE_MS = 30_000;

export interface ContextInfo {
  name: string;
  language: ContextLanguage;
  cwd: string;
  env: Record<string, string>;
  pid: number;
  created_at: string;
  /** False when its process is gone (killed from inside the sandbox): restart it. */
  alive: boolean;
}

/** One event of an eval, as the runner sends it. */
export type RunnerEvent =
  | { type: 'stdout' | 'stderr'; text: string }
  | { type: 'result'; main: boolean; data: Record<string, unknown> }
  | { type: 'error'; name: string; value: string; traceback: string }
  | { type: 'end'; execution_count: number; duration_ms: number };

const runnerSources = new Map<ContextLanguage, Promise<Buffer>>();

/** A runner's source as shipped in this checkout (read once). */
function source(language: ContextLanguage): Promise<Buffer> {
  let src = runnerSources.get(language);
  if (!src) {
    src = readFile(join(repoRoot(), ...RUNNERS[language].source));
    runnerSources.set(language, src);
  }
  return src;
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function contextFile(name: string, ext: string): string {
  return `${CONTEXTS_DIR}/${name}.${ext}`;
}

function notFound(name: string): ForkdError {
  return new ForkdError(
    'context_not_found',
    `no code context "${name}" in this sandbox: list them with forkd context ls, or create it`,
    { context: name },
  );
}

/** Runs a shell snippet; a non-zero exit becomes guest_error with its output. */
async function sh(agent: AgentClient, script: string, what: string): Promise<string> {
  const r = await agent.run({ argv: ['sh', '-c', script] });
  if (r.exitCode !== 0) {
    const output = (r.stdout.toString() + r.stderr.toString()).trim().slice(-2000);
    throw new ForkdError('guest_error', `${what} failed in the guest: ${output}`, { output });
  }
  return r.stdout.toString();
}

/** Every context of the sandbox, from the runner's metadata files. */
export async function listContexts(agent: AgentClient): Promise<ContextInfo[]> {
  const out = await sh(
    agent,
    `for f in ${CONTEXTS_DIR}/*.json; do [ -e "$f" ] || continue; ` +
      `p=$(cat "\${f%.json}.pid" 2>/dev/null); ` +
      `if [ -n "$p" ] && [ -d /proc/$p ]; then a=1; else a=0; fi; ` +
      `printf '%s %s\\n' "$a" "$(cat "$f")"; done`,
    'listing contexts',
  );
  return out
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => ({ ...(JSON.parse(l.slice(2)) as ContextInfo), alive: l[0] === '1' }));
}

export async function getContext(agent: AgentClient, name: string): Promise<ContextInfo> {
  const found = (await listContexts(agent)).find((c) => c.name === name);
  if (!found) throw notFound(name);
  return found;
}

/** Start a context's interpreter; resolves once it serves. */
export async function startContext(agent: AgentClient, req: StartRequest): Promise<void> {
  const runner = RUNNERS[req.language];
  await agent.writeFile(runner.path, await source(req.language), { mode: 0o644, parents: true });
  const missing = () =>
    new ForkdError(
      'command_not_found',
      `${runner.interpreter} is not in the sandbox image: build one with it ` +
        `(forkd image build --debian bookworm --packages ${runner.debian})`,
      { command: runner.interpreter },
    );
  const r = await agent.run({ argv: runner.starter(req) }).catch((e: unknown) => {
    throw e instanceof ForkdError && e.code === 'command_not_found' ? missing() : e;
  });
  if (r.exitCode === 127) throw missing();
  if (r.exitCode !== 0) {
    const output = r.stderr.toString().trim().slice(-2000);
    const cwdMissing = /FileNotFoundError|No such file/.test(output);
    throw new ForkdError(
      cwdMissing ? 'cwd_not_found' : 'guest_error',
      cwdMissing
        ? `the context's cwd ${req.cwd} does not exist in the sandbox`
        : `the context "${req.name}" did not start: ${output}`,
      { context: req.name, output },
    );
  }
}

/** End a context's process group and remove its files. */
export async function removeContext(agent: AgentClient, name: string): Promise<void> {
  await getContext(agent, name);
  const pidFile = shellQuote(contextFile(name, 'pid'));
  await sh(
    agent,
    `p=$(cat ${pidFile} 2>/dev/null); [ -n "$p" ] && kill -KILL -"$p" 2>/dev/null; ` +
      `rm -f ${['json', 'pid', 'sock', 'log'].map((e) => shellQuote(contextFile(name, e))).join(' ')}`,
    'removing the context',
  );
}

/** SIGINT to the context's interpreter: the running code gets KeyboardInterrupt. */
export async function interruptContext(agent: AgentClient, name: string): Promise<void> {
  const ctx = await getContext(agent, name);
  if (!ctx.alive) return;
  await sh(agent, `kill -INT ${ctx.pid}`, 'interrupting the context');
}

export interface EvalHandle {
  /** Events in order, ending with `end` (resolves `done`), or an error. */
  readonly done: Promise<void>;
  /** Cut the pipe (the code keeps running unless interrupted too). */
  cancel(): Promise<void>;
}

/** Splits the runner's NDJSON output into events (chunks may cut lines anywhere). */
function lineSplitter(onLine: (line: string) => void): (chunk: Buffer) => void {
  let pending = '';
  return (chunk) => {
    pending += chunk.toString('utf8');
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      if (line.trim()) onLine(line);
    }
  };
}

/** Why an eval's pipe ended before the runner's `end` event. */
function withoutEnd(context: string, r: { exitCode: number | null; timedOut: boolean }): ForkdError {
  if (r.exitCode === 3) return notFound(context);
  if (r.exitCode === 2) {
    return new ForkdError(
      'unsupported',
      "the sandbox's agent predates code contexts (no --connect mode): recreate its snapshot or image",
      { context },
    );
  }
  return new ForkdError(
    r.timedOut ? 'timeout' : 'guest_error',
    r.timedOut
      ? `the context "${context}" did not answer in time`
      : `the context "${context}" ended the eval without a result (its process died?)`,
    { context },
  );
}

/**
 * Run code in a context; `onEvent` gets the runner's events as they come. The context must
 * exist (context_not_found otherwise: a socket without a server is reported the same way).
 */
export function evalCode(
  agent: AgentClient,
  req: { context: string; code: string; timeoutMs: number },
  onEvent: (ev: RunnerEvent) => void,
): EvalHandle {
  let sawEnd: (() => void) | undefined;
  const ended = new Promise<void>((resolve) => (sawEnd = resolve));
  const handle: ExecHandle = agent.exec(
    {
      argv: [AGENT_SELF, '--connect', contextFile(req.context, 'sock')],
      stdin: true,
      timeoutMs: req.timeoutMs + PIPE_GRACE_MS,
    },
    {
      onStdout: lineSplitter((line) => {
        const ev = JSON.parse(line) as RunnerEvent;
        onEvent(ev);
        if (ev.type === 'end') sawEnd?.();
      }),
    },
  );
  const request = JSON.stringify({ op: 'eval', code: req.code, timeout_ms: req.timeoutMs });
  const exited = (async () => {
    await handle.started;
    await handle.writeStdin(Buffer.from(`${request}\n`));
    await handle.endStdin();
    throw withoutEnd(req.context, await handle.result);
  })();
  // Done at the `end` event: the client's exit (and the agent's EOF grace) is not waited for.
  const done = Promise.race([ended, exited]);
  exited.catch(() => undefined);
  return { done, cancel: () => handle.kill() };
}
