/**
 * Code contexts: warm interpreters in a sandbox that keep their state between calls
 * (`sandbox.eval`, `sandbox.contexts`), inherited by forks and branches, and eval
 * fan-out (`sandbox.evalFork`). The results follow E2B's Execution/Result shape: rich
 * outputs keyed by MIME type, logs, and an error with its name, value and traceback.
 */
import type { CallOptions } from './client.js';
import { errorFromResponse, InternalError } from './errors.js';
import type { Transport } from './http.js';
import { ndjson } from './ndjson.js';

/** The interpreter of a context. */
export type ContextLanguage = 'python' | 'node';

/** One context as the daemon reports it. */
export interface ContextInfo {
  name: string;
  language: ContextLanguage;
  cwd: string;
  env: Record<string, string>;
  /** The interpreter's pid in the guest. */
  pid: number;
  createdAt: string;
  /** False when its process died inside the sandbox: restart it. */
  alive: boolean;
}

interface WireContext {
  name: string;
  language: ContextLanguage;
  cwd: string;
  env: Record<string, string>;
  pid: number;
  created_at: string;
  alive: boolean;
}

function toContext(w: WireContext): ContextInfo {
  return {
    name: w.name,
    language: w.language,
    cwd: w.cwd,
    env: w.env,
    pid: w.pid,
    createdAt: w.created_at,
    alive: w.alive,
  };
}

/**
 * One rich output of a cell, keyed by MIME type (`data`), with shortcuts per format.
 *
 * @example
 * const png = execution.results.find((r) => r.png)?.png; // base64
 */
export class Result {
  constructor(
    /** MIME type → value: text, base64 for images, parsed JSON for application/json. */
    readonly data: Record<string, unknown>,
    /** True for the value of the cell's last expression; false for figures and displays. */
    readonly isMainResult: boolean,
  ) {}

  private str(mime: string): string | undefined {
    const v = this.data[mime];
    return typeof v === 'string' ? v : undefined;
  }

  /** text/plain (the value's repr). */
  get text(): string | undefined {
    return this.str('text/plain');
  }
  get html(): string | undefined {
    return this.str('text/html');
  }
  get markdown(): string | undefined {
    return this.str('text/markdown');
  }
  get svg(): string | undefined {
    return this.str('image/svg+xml');
  }
  /** image/png, base64. */
  get png(): string | undefined {
    return this.str('image/png');
  }
  get latex(): string | undefined {
    return this.str('text/latex');
  }
  /** application/json: the value itself when it has an exact JSON form. */
  get json(): unknown {
    return this.data['application/json'];
  }
  /** The MIME types it has. */
  formats(): string[] {
    return Object.keys(this.data);
  }
}

/** The error the code raised (not a failure of forkd: those are thrown). */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

/**
 * What one eval gave: results, logs, the code's error if it raised.
 *
 * @example
 * const x = await sandbox.eval('1 + 1');
 * console.log(x.text); // '2'
 */
export class Execution {
  constructor(
    readonly results: Result[],
    readonly logs: { stdout: string[]; stderr: string[] },
    readonly error: ExecutionError | null,
    readonly executionCount: number,
    readonly durationMs: number,
  ) {}

  /** The main result's text/plain, if the cell ended with an expression. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }
}

type EvalEvent =
  | { type: 'stdout' | 'stderr'; text: string }
  | { type: 'result'; is_main_result: boolean; data: Record<string, unknown> }
  | ({ type: 'error' } & ExecutionError)
  | { type: 'end'; execution_count: number; duration_ms: number }
  | { type: 'failed'; error: { code: string; message: string } };

interface WireExecution {
  results: { is_main_result: boolean; data: Record<string, unknown> }[];
  logs: { stdout: string[]; stderr: string[] };
  error: ExecutionError | null;
  execution_count: number;
  duration_ms: number;
}

function toExecution(w: WireExecution): Execution {
  return new Execution(
    w.results.map((r) => new Result(r.data, r.is_main_result)),
    w.logs,
    w.error,
    w.execution_count,
    w.duration_ms,
  );
}

/**
 * How to run code. With any callback the eval streams: output arrives as the code runs.
 *
 * @example
 * await sandbox.eval('for i in range(3): print(i)', { onStdout: (s) => process.stdout.write(s) });
 */
export interface EvalOptions extends CallOptions {
  /** The context to run in (default `python`, created on first use). */
  context?: string;
  /** Interrupt the code after this long (default 300 s); the context lives on. */
  timeoutMs?: number;
  onStdout?(text: string): void | Promise<void>;
  onStderr?(text: string): void | Promise<void>;
  onResult?(result: Result): void | Promise<void>;
  onError?(error: ExecutionError): void | Promise<void>;
}

/** The former name of {@link EvalOptions}, kept as an alias. */
export type RunCodeOptions = EvalOptions;

/** What a fan-out gave: one entry per variant, in order. */
export interface EvalForkResult {
  /** The branch the children were forked from (it stays: the source's disk layers on it). */
  snapshot: string;
  results: {
    index: number;
    sandbox: string | null;
    execution: Execution | null;
    /** Why this variant has no execution (its child did not come up, …). */
    failure: { code: string; message: string } | null;
  }[];
}

function evalBody(code: string, opts: EvalOptions, stream: boolean) {
  return {
    code,
    ...(opts.context ? { context: opts.context } : {}),
    ...(opts.timeoutMs === undefined ? {} : { timeout_ms: Math.ceil(opts.timeoutMs) }),
    ...(stream ? { stream: true } : {}),
  };
}

/** Run code in a context of the sandbox at `base` (`/v1/sandboxes/ID`). */
export async function evalCode(
  transport: Transport,
  base: string,
  code: string,
  opts: EvalOptions = {},
): Promise<Execution> {
  const stream = Boolean(opts.onStdout || opts.onStderr || opts.onResult || opts.onError);
  const spec = {
    method: 'POST' as const,
    path: `${base}/eval`,
    json: evalBody(code, opts, stream),
    signal: opts.signal,
  };
  if (!stream) return toExecution(await transport.json<WireExecution>(spec));
  const res = await transport.send(spec);
  const x: WireExecution = {
    results: [],
    logs: { stdout: [], stderr: [] },
    error: null,
    execution_count: 0,
    duration_ms: 0,
  };
  for await (const ev of ndjson<EvalEvent>(transport.body(res, opts.signal))) {
    if (ev.type === 'stdout' || ev.type === 'stderr') {
      x.logs[ev.type].push(ev.text);
      await (ev.type === 'stdout' ? opts.onStdout : opts.onStderr)?.(ev.text);
    } else if (ev.type === 'result') {
      x.results.push({ is_main_result: ev.is_main_result, data: ev.data });
      await opts.onResult?.(new Result(ev.data, ev.is_main_result));
    } else if (ev.type === 'error') {
      x.error = { name: ev.name, value: ev.value, traceback: ev.traceback };
      await opts.onError?.(x.error);
    } else if (ev.type === 'end') {
      return toExecution({
        ...x,
        execution_count: ev.execution_count,
        duration_ms: ev.duration_ms,
      });
    } else if (ev.type === 'failed') {
      throw errorFromResponse(500, ev);
    }
  }
  throw new InternalError('the eval stream ended before the code finished; try again');
}

/** Fan-out: one child per variant, branched from the sandbox's current state. */
export async function evalFork(
  transport: Transport,
  base: string,
  variants: string[],
  opts: { context?: string; timeoutMs?: number; keep?: boolean } & CallOptions = {},
): Promise<EvalForkResult> {
  const wire = await transport.json<{
    snapshot: string;
    results: {
      index: number;
      sandbox: string | null;
      execution: WireExecution | null;
      failure: { code: string; message: string } | null;
    }[];
  }>({
    method: 'POST',
    path: `${base}/eval-fork`,
    json: {
      variants,
      ...(opts.context ? { context: opts.context } : {}),
      ...(opts.timeoutMs === undefined ? {} : { timeout_ms: Math.ceil(opts.timeoutMs) }),
      ...(opts.keep ? { keep: true } : {}),
    },
    signal: opts.signal,
  });
  return {
    snapshot: wire.snapshot,
    results: wire.results.map((r) => ({
      ...r,
      execution: r.execution ? toExecution(r.execution) : null,
    })),
  };
}

/**
 * The code contexts of one sandbox (`sandbox.contexts`).
 *
 * @example
 * await sandbox.contexts.create({ name: 'data', cwd: '/data' });
 * await sandbox.eval('import os; os.getcwd()', { context: 'data' });
 */
export class Contexts {
  constructor(
    private readonly transport: Transport,
    /** `/v1/sandboxes/ID`. */
    private readonly base: string,
  ) {}

  /**
   * Start a context with its own cwd and environment: `language` `python` (the default)
   * or `node`; the name defaults to the language (a context named `node` is Node).
   *
   * @example
   * const ctx = await sandbox.contexts.create({ name: 'b', envs: { MODE: 'test' } });
   * await sandbox.contexts.create({ language: 'node' }); // eval(code, {context: 'node'})
   */
  async create(
    opts: {
      name?: string;
      language?: ContextLanguage;
      cwd?: string;
      envs?: Record<string, string>;
    } & CallOptions = {},
  ): Promise<ContextInfo> {
    const json = {
      ...(opts.language ? { language: opts.language } : {}),
      ...(opts.name ? { name: opts.name } : {}),
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
      ...(opts.envs ? { env: opts.envs } : {}),
    };
    const path = `${this.base}/contexts`;
    return toContext(
      await this.transport.json<WireContext>({ method: 'POST', path, json, signal: opts.signal }),
    );
  }

  /**
   * Every context of the sandbox.
   *
   * @example
   * for (const c of await sandbox.contexts.list()) console.log(c.name, c.alive);
   */
  async list(opts: CallOptions = {}): Promise<ContextInfo[]> {
    const path = `${this.base}/contexts`;
    const wire = await this.transport.json<WireContext[]>({
      method: 'GET',
      path,
      signal: opts.signal,
    });
    return wire.map(toContext);
  }

  /**
   * Fresh state: the interpreter is replaced, keeping its cwd and environment.
   *
   * @example
   * await sandbox.contexts.restart('python');
   */
  async restart(name: string, opts: CallOptions = {}): Promise<ContextInfo> {
    const path = `${this.base}/contexts/${encodeURIComponent(name)}/restart`;
    return toContext(
      await this.transport.json<WireContext>({ method: 'POST', path, signal: opts.signal }),
    );
  }

  /**
   * Interrupt the code running in it (KeyboardInterrupt); the context lives on.
   *
   * @example
   * await sandbox.contexts.interrupt('python');
   */
  async interrupt(name: string, opts: CallOptions = {}): Promise<void> {
    const path = `${this.base}/contexts/${encodeURIComponent(name)}/interrupt`;
    await this.transport.bytes({ method: 'POST', path, signal: opts.signal });
  }

  /**
   * End it and forget its state.
   *
   * @example
   * await sandbox.contexts.remove('scratch');
   */
  async remove(name: string, opts: CallOptions = {}): Promise<void> {
    const path = `${this.base}/contexts/${encodeURIComponent(name)}`;
    await this.transport.bytes({ method: 'DELETE', path, signal: opts.signal });
  }
}
