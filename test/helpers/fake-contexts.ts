/**
 * A fake ContextService for the API tests: contexts kept in memory per sandbox (the seeded
 * sandbox has one, `python`), eval that "runs" code by a few fixed rules: `print(X)` writes
 * X to stdout, `raise X` is an error named X, anything else is its own main result, and
 * `sleep` streams slowly. Fan-out runs each variant in a made-up child.
 */
import { ForkdError } from '../../src/errors.js';
import {
  DEFAULT_CONTEXT,
  languageOfName,
  type ContextT,
  type CreateContextT,
  type EvalEventT,
  type EvalForkRequestT,
  type EvalForkResultT,
  type EvalRequestT,
  type ExecutionT,
} from '../../src/contract/contexts.js';
import type { ContextService } from '../../src/services/contracts.js';
import { ExecutionBuilder } from '../../src/services/contexts/execution.js';

export const SEED_CONTEXT = 'python';

function contextRecord(name: string, req: CreateContextT = {}): ContextT {
  return {
    name,
    language: req.language ?? languageOfName(name) ?? 'python',
    cwd: req.cwd ?? '/root',
    env: req.env ?? {},
    pid: 100,
    created_at: '2026-12-01T00:00:00.000Z',
    alive: true,
  };
}

/** What the fake's `plot()` displays: a PNG signature, base64. */
export const FAKE_PNG = Buffer.from('\x89PNG\r\n\x1a\n', 'latin1').toString('base64');

function eventsOf(code: string, count: number): EvalEventT[] {
  const printed = /^print\((.*)\)$/.exec(code);
  const raised = /^raise (\w+)/.exec(code);
  if (code === 'plot()') {
    const png = { 'image/png': FAKE_PNG, 'text/plain': '<Figure>' };
    const figure: EvalEventT = { type: 'result', is_main_result: false, data: png };
    return [figure, { type: 'end', execution_count: count, duration_ms: 1 }];
  }
  const body: EvalEventT[] = printed
    ? [{ type: 'stdout', text: `${printed[1]}\n` }]
    : raised
      ? [{ type: 'error', name: raised[1] ?? 'Error', value: '', traceback: `${raised[1]}\n` }]
      : [{ type: 'result', is_main_result: true, data: { 'text/plain': code } }];
  return [...body, { type: 'end', execution_count: count, duration_ms: 1 }];
}

export class FakeContexts implements ContextService {
  private contexts = new Map<string, Map<string, ContextT>>();
  private count = 0;
  delayMs = 5;

  constructor(
    private readonly running: (id: string) => void,
    private readonly seed: string,
  ) {
    this.reset();
  }

  reset(): void {
    this.contexts = new Map([[this.seed, new Map([[SEED_CONTEXT, contextRecord(SEED_CONTEXT)]])]]);
    this.count = 0;
  }

  private of(id: string): Map<string, ContextT> {
    this.running(id);
    let m = this.contexts.get(id);
    if (!m) this.contexts.set(id, (m = new Map()));
    return m;
  }

  private context(id: string, name: string): ContextT {
    const c = this.of(id).get(name);
    if (!c)
      throw new ForkdError('context_not_found', `no code context "${name}"`, { context: name });
    return c;
  }

  async create(id: string, req: CreateContextT): Promise<ContextT> {
    const name = req.name ?? req.language ?? DEFAULT_CONTEXT;
    if (this.of(id).has(name)) throw new ForkdError('name_taken', `context "${name}" exists`);
    const c = contextRecord(name, req);
    this.of(id).set(name, c);
    return c;
  }

  async list(id: string): Promise<ContextT[]> {
    return [...this.of(id).values()];
  }

  async restart(id: string, name: string): Promise<ContextT> {
    return { ...this.context(id, name), pid: 101 };
  }

  async remove(id: string, name: string): Promise<void> {
    this.context(id, name);
    this.of(id).delete(name);
  }

  async interrupt(id: string, name: string): Promise<void> {
    this.context(id, name);
  }

  async evalStream(id: string, req: EvalRequestT): Promise<AsyncIterable<EvalEventT>> {
    const name = req.context ?? DEFAULT_CONTEXT;
    if (name === DEFAULT_CONTEXT && !this.of(id).has(name)) await this.create(id, { name });
    this.context(id, name);
    const events = eventsOf(req.code, ++this.count);
    const delay = this.delayMs;
    return (async function* () {
      for (const ev of events) {
        await new Promise((resolve) => setTimeout(resolve, delay));
        yield ev;
      }
    })();
  }

  async eval(id: string, req: EvalRequestT): Promise<ExecutionT> {
    const x = new ExecutionBuilder();
    for await (const ev of await this.evalStream(id, req)) x.add(ev);
    return x.finish();
  }

  async evalFork(id: string, req: EvalForkRequestT): Promise<EvalForkResultT> {
    this.running(id);
    const results = await Promise.all(
      req.variants.map(async (code, index) => ({
        index,
        sandbox: `sbx-${(0xf00 + index).toString(16).padStart(12, '0')}`,
        execution: await this.eval(id, { code, context: req.context }),
        failure: null,
      })),
    );
    return { snapshot: `${id}-fanout`, results };
  }
}
