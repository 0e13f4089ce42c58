/**
 * Code contexts and eval: warm interpreters in a sandbox (created, listed, restarted,
 * removed, interrupted) and code run in them, streamed or gathered into an Execution.
 * Contexts live in the guest only (drivers/agent/runner.ts), so forks and branches inherit
 * them with their state and nothing here needs to be recorded. Fan-out branches the
 * sandbox with N children and runs one variant in each.
 */
import {
  DEFAULT_CONTEXT,
  DEFAULT_EVAL_TIMEOUT_MS,
  languageOfName,
  type ContextT,
  type CreateContextT,
  type EvalEventT,
  type EvalForkRequestT,
  type EvalForkResultT,
  type EvalRequestT,
  type ExecutionT,
} from '../../contract/contexts.js';
import type { AgentClient } from '../../drivers/agent/client.js';
import {
  evalCode,
  getContext,
  interruptContext,
  listContexts,
  removeContext,
  startContext,
} from '../../drivers/agent/runner.js';
import { ForkdError, isForkdError } from '../../errors.js';
import type { BranchService, Caller, ContextService, SandboxService } from '../contracts.js';
import { EventQueue } from '../../util/queue.js';
import { ExecutionBuilder, toEvalEvent } from './execution.js';

export interface ContextManagerOptions {
  /** The agent session of a running sandbox (sandbox_not_found / _not_running otherwise). */
  agentOf(id: string): Promise<AgentClient>;
  sandboxes: Pick<SandboxService, 'kill'>;
  branch: BranchService;
  /** A slot under the daemon's cap on running commands, held while an eval runs. */
  execSlot?(): () => void;
}

const DEFAULT_CWD = '/root';
/** The label on snapshots made by a fan-out (they stay: the source's disk layers on them). */
export const EVAL_FORK_LABEL = 'forkd.eval-fork';

export class ContextManager implements ContextService {
  constructor(private readonly opts: ContextManagerOptions) {}

  async create(id: string, req: CreateContextT): Promise<ContextT> {
    const agent = await this.opts.agentOf(id);
    const name = req.name ?? req.language ?? DEFAULT_CONTEXT;
    const language = req.language ?? languageOfName(name) ?? 'python';
    const existing = (await listContexts(agent)).find((c) => c.name === name);
    if (existing?.alive) {
      throw new ForkdError('name_taken', `the sandbox already has a context "${name}"`, {
        context: name,
      });
    }
    await startContext(agent, { name, language, cwd: req.cwd ?? DEFAULT_CWD, env: req.env ?? {} });
    return getContext(agent, name);
  }

  async list(id: string): Promise<ContextT[]> {
    return listContexts(await this.opts.agentOf(id));
  }

  async restart(id: string, name: string): Promise<ContextT> {
    const agent = await this.opts.agentOf(id);
    const old = await getContext(agent, name);
    await removeContext(agent, name);
    await startContext(agent, { name, language: old.language, cwd: old.cwd, env: old.env });
    return getContext(agent, name);
  }

  async remove(id: string, name: string): Promise<void> {
    await removeContext(await this.opts.agentOf(id), name);
  }

  async interrupt(id: string, name: string): Promise<void> {
    await interruptContext(await this.opts.agentOf(id), name);
  }

  async evalStream(id: string, req: EvalRequestT): Promise<AsyncIterable<EvalEventT>> {
    const agent = await this.opts.agentOf(id);
    const context = req.context ?? DEFAULT_CONTEXT;
    try {
      return await this.startCounted(agent, context, req);
    } catch (e) {
      // A language's default context is made on first use, as a notebook's kernel is.
      if (!(isForkdError(e) && e.code === 'context_not_found') || !languageOfName(context)) {
        throw e;
      }
      await this.create(id, { name: context });
      return this.startCounted(agent, context, req);
    }
  }

  /** An eval holding an exec slot (`capacity` past the daemon's cap) until its code ends. */
  private async startCounted(agent: AgentClient, context: string, req: EvalRequestT) {
    const release = this.opts.execSlot?.() ?? (() => undefined);
    try {
      return await startEval(agent, context, req, release);
    } catch (e) {
      release();
      throw e;
    }
  }

  async eval(id: string, req: EvalRequestT): Promise<ExecutionT> {
    const execution = new ExecutionBuilder();
    for await (const ev of await this.evalStream(id, req)) execution.add(ev);
    return execution.finish();
  }

  async evalFork(id: string, req: EvalForkRequestT, caller: Caller): Promise<EvalForkResultT> {
    const branched = await this.opts.branch.branch(
      id,
      { fork: req.variants.length, labels: { [EVAL_FORK_LABEL]: id } },
      caller,
    );
    const children = branched.children ?? { sandboxes: [], failed: [] };
    const failedAt = new Map(children.failed.map((f) => [f.index, f.error]));
    let next = 0;
    const results = await Promise.all(
      req.variants.map(async (code, index) => {
        const failed = failedAt.get(index);
        if (failed !== undefined) return failure(index, null, failed);
        const child = children.sandboxes[next++];
        if (!child) return failure(index, null, new ForkdError('internal', 'child missing'));
        try {
          const execution = await this.eval(child.id, { ...req, code });
          return { index, sandbox: child.id, execution, failure: null };
        } catch (e) {
          return failure(index, child.id, e);
        } finally {
          if (!req.keep) await this.opts.sandboxes.kill(child.id).catch(() => undefined);
        }
      }),
    );
    return { snapshot: branched.snapshot.tag, results };
  }
}

function failure(index: number, sandbox: string | null, e: unknown) {
  const err = isForkdError(e)
    ? e
    : new ForkdError('internal', 'the variant failed: see the daemon log');
  return {
    index,
    sandbox,
    execution: null,
    failure: { code: err.code, message: err.message, details: err.details ?? {} },
  };
}

/**
 * Starts an eval and resolves once its first event came, so a missing context is an error
 * of this call and not of the stream. A reader that leaves interrupts the code. `release`
 * frees its exec slot once the code ended (the caller frees it if this throws).
 */
async function startEval(
  agent: AgentClient,
  context: string,
  req: EvalRequestT,
  release: () => void,
): Promise<AsyncIterable<EvalEventT>> {
  let first: (() => void) | undefined;
  const gotFirst = new Promise<void>((resolve) => (first = resolve));
  const queue = new EventQueue<EvalEventT>(() => {
    void handle.cancel().catch(() => undefined);
    void interruptContext(agent, context).catch(() => undefined);
  });
  const handle = evalCode(
    agent,
    { context, code: req.code, timeoutMs: req.timeout_ms ?? DEFAULT_EVAL_TIMEOUT_MS },
    (ev) => {
      queue.push(toEvalEvent(ev));
      first?.();
    },
  );
  handle.done.then(
    () => {
      release();
      queue.close();
    },
    (e: unknown) => {
      release();
      queue.close(e);
    },
  );
  await Promise.race([gotFirst, handle.done]);
  return queue;
}
