/**
 * What code contexts and fork hooks add to a snapshot: at `snapshot create`, contexts are
 * started in the parent and warmed with code (so every fork inherits the interpreter with
 * its imports); after each child's restore, the snapshot's `on_fork` commands run in it
 * before the child is handed out (a failing hook fails that child).
 */
import { languageOfName } from '../../contract/contexts.js';
import type { CreateSnapshotT } from '../../contract/schemas.js';
import type { AgentClient } from '../../drivers/agent/client.js';
import { evalCode, startContext, type RunnerEvent } from '../../drivers/agent/runner.js';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { readManifest, type SnapshotManifest } from './files.js';

const DEFAULT_CWD = '/root';
const WARM_EVAL_TIMEOUT_MS = 600_000;
const OUTPUT_TAIL = 2000;

/** Start the requested contexts and run the warm-up code in the first one. */
export async function warmContexts(
  agent: AgentClient,
  req: Pick<CreateSnapshotT, 'contexts' | 'eval' | 'env'>,
  onProgress: (message: string) => void,
): Promise<void> {
  const names = req.contexts ?? [];
  if (req.eval?.length && names.length === 0) {
    throw new ForkdError('bad_request', 'eval needs a context: add contexts (--context python)', {
      field: 'body.eval',
    });
  }
  for (const name of names) {
    onProgress(`context: ${name}`);
    const language = languageOfName(name) ?? 'python';
    await startContext(agent, { name, language, cwd: DEFAULT_CWD, env: req.env ?? {} });
  }
  for (const code of req.eval ?? []) {
    onProgress(`eval in ${names[0]}: ${code.split('\n')[0]}`);
    await mustEval(agent, names[0] as string, code);
  }
}

async function mustEval(agent: AgentClient, context: string, code: string): Promise<void> {
  let error: Extract<RunnerEvent, { type: 'error' }> | undefined;
  const h = evalCode(agent, { context, code, timeoutMs: WARM_EVAL_TIMEOUT_MS }, (ev) => {
    if (ev.type === 'error') error = ev;
  });
  await h.done;
  if (!error) return;
  const traceback = error.traceback.slice(-OUTPUT_TAIL);
  throw new ForkdError(
    'bad_request',
    `warm-up code failed (${error.name}): ${code}\n${traceback}`,
    {
      code,
      name: error.name,
      traceback,
    },
  );
}

/** Run the snapshot's on-fork commands in a freshly restored child, in order. */
export async function runForkHooks(
  agent: AgentClient,
  onFork: string[] | undefined,
): Promise<void> {
  for (const cmd of onFork ?? []) {
    const r = await agent.run({ argv: ['sh', '-c', cmd] });
    if (r.exitCode === 0) continue;
    const output = (r.stdout.toString() + r.stderr.toString()).slice(-OUTPUT_TAIL);
    throw new ForkdError(
      'guest_error',
      `the on-fork command failed (${r.exitCode === null ? r.signal : `exit ${r.exitCode}`}): ${cmd}\n${output}`,
      { command: cmd, exit_code: r.exitCode, output },
    );
  }
}

/**
 * A branch keeps what the snapshot its source was forked from gives its children: the
 * on-fork commands, the default user and working directory, a build's config (docs/build.md).
 */
export async function inheritedFromSnapshot(
  p: Paths,
  snapshot: string | null,
): Promise<Pick<SnapshotManifest, 'on_fork' | 'user' | 'workdir' | 'config'>> {
  if (!snapshot) return {};
  const m = await readManifest(p, snapshot).catch(() => undefined);
  return {
    ...(m?.on_fork?.length ? { on_fork: m.on_fork } : {}),
    ...(m?.config ? { config: m.config } : {}),
    ...(m?.user ? { user: m.user } : {}),
    ...(m?.workdir ? { workdir: m.workdir } : {}),
  };
}
