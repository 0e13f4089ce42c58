/**
 * Running a command in the guest: one `exec` request whose replies are `started`, output
 * chunks and a terminal `result`, plus the `stdin` and `signal` messages that target it.
 */
import { SIGNALS } from '../../contract/rules.js';
import { ForkdError } from '../../errors.js';
import { deferred, quiet, type AgentConnection } from './connection.js';
import { agentError } from './errors.js';
import { MAX_LIST_ENTRIES, decodeData, slices, type AgentMessage } from './wire.js';

export interface ExecRequest {
  argv: string[];
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
  /** Stream stdin with writeStdin/endStdin; otherwise the command reads /dev/null. */
  stdin?: boolean;
  /** Enforced by the agent: SIGKILL to the process group, then `timedOut: true`. */
  timeoutMs?: number;
  /** Aborting kills the command (SIGKILL); the result then reports the signal. */
  signal?: AbortSignal;
  /**
   * With `timeoutMs`: how long past it the host waits for the agent's result before failing
   * the exec with `timeout` itself (a hung guest never answers). Default EXEC_GRACE_MS.
   */
  graceMs?: number;
}

/** Past an exec's own timeout, time for the agent's kill and result on a loaded TCG host. */
export const EXEC_GRACE_MS = 30_000;

export interface ExecResult {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  durationMs: number;
}

export interface ExecHandlers {
  onStdout?(chunk: Buffer): void;
  onStderr?(chunk: Buffer): void;
}

export interface ExecHandle {
  /** The guest pid; rejects like `result` when the command could not start. */
  readonly started: Promise<number>;
  /** Sent in pieces of at most 192 KiB; resolves once the socket took them. */
  writeStdin(chunk: Buffer): Promise<void>;
  endStdin(): Promise<void>;
  /** Signals the command's process group (default SIGKILL); a finished command is no error. */
  kill(signal?: string): Promise<void>;
  /** Rejects (`command_not_found`, `guest_permission_denied`, …) when it could not start. */
  readonly result: Promise<ExecResult>;
}

function badRequest(message: string, details?: Record<string, unknown>): ForkdError {
  return new ForkdError('bad_request', message, details);
}

/** Refuses locally what the agent would refuse, so the error names the field. */
function validate(req: ExecRequest): void {
  const { argv, env, timeoutMs } = req;
  if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== 'string')) {
    throw badRequest('argv must be a non-empty list of strings');
  }
  if (argv.length > MAX_LIST_ENTRIES || Object.keys(env ?? {}).length > MAX_LIST_ENTRIES) {
    throw badRequest(`argv and env take at most ${MAX_LIST_ENTRIES} entries each`);
  }
  if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs >= 0)) {
    throw badRequest('timeoutMs must be a non-negative integer', { timeoutMs });
  }
}

function toResult(msg: AgentMessage): ExecResult {
  return {
    exitCode: typeof msg.exit_code === 'number' ? msg.exit_code : null,
    signal: typeof msg.signal === 'string' ? msg.signal : null,
    timedOut: msg.timed_out === true,
    durationMs: typeof msg.duration_ms === 'number' ? msg.duration_ms : 0,
  };
}

/** A `result` without `started` breaks the protocol; `started` must not hang on it. */
function neverStarted(): ForkdError {
  return new ForkdError('guest_error', 'the guest agent ended an exec it never reported started');
}

class RunningExec implements ExecHandle {
  readonly started: Promise<number>;
  readonly result: Promise<ExecResult>;
  private readonly pid = deferred<number>();
  private readonly outcome = deferred<ExecResult>();
  private readonly hasStdin: boolean;
  /** Named in a cwd_not_found / user_not_found error. */
  private readonly cwd?: string;
  private readonly user?: string;
  private id = 0;

  constructor(
    private readonly conn: AgentConnection,
    req: ExecRequest,
    private readonly handlers: ExecHandlers,
  ) {
    this.started = quiet(this.pid.promise);
    this.result = quiet(this.outcome.promise);
    this.hasStdin = req.stdin === true;
    this.cwd = req.cwd;
    this.user = req.user;
    try {
      validate(req);
      this.id = conn.open(
        {
          type: 'exec',
          argv: req.argv,
          env: req.env,
          cwd: req.cwd,
          user: req.user,
          stdin: this.hasStdin,
          timeout_ms: req.timeoutMs,
        },
        { onMessage: (msg) => this.onMessage(msg, req.argv[0]), fail: (err) => this.fail(err) },
      );
    } catch (e) {
      this.fail(e);
    }
    this.killOnAbort(req.signal);
    this.failPastTimeout(req);
  }

  /** The agent enforces timeoutMs; this is for an agent that never answers at all. */
  private failPastTimeout(req: ExecRequest): void {
    if (!req.timeoutMs || this.ended) return;
    const grace = req.graceMs ?? EXEC_GRACE_MS;
    const timer = setTimeout(() => {
      if (this.ended) return;
      this.fail(
        new ForkdError(
          'timeout',
          `the guest agent did not end the command within ${grace} ms past its ${req.timeoutMs} ms timeout: the guest may be hung; check its console log`,
          { timeoutMs: req.timeoutMs, graceMs: grace },
        ),
      );
    }, req.timeoutMs + grace);
    timer.unref();
    const clear = () => clearTimeout(timer);
    this.result.then(clear, clear);
  }

  private get ended(): boolean {
    return this.outcome.settled;
  }

  async writeStdin(chunk: Buffer): Promise<void> {
    this.checkStdin();
    for (const piece of slices(chunk)) {
      // Like a closed pipe: once the command is gone its input has nowhere to go.
      if (this.ended) return;
      await this.conn.sendFlow({ type: 'stdin', id: this.id, data: piece.toString('base64') });
    }
  }

  async endStdin(): Promise<void> {
    this.checkStdin();
    if (!this.ended) this.conn.send({ type: 'stdin', id: this.id, eof: true });
  }

  async kill(signal = 'SIGKILL'): Promise<void> {
    if (!(SIGNALS as readonly string[]).includes(signal)) {
      throw badRequest(`unknown signal ${signal}; use one of ${SIGNALS.join(', ')}`);
    }
    if (this.ended) return;
    try {
      await this.conn.call({ type: 'signal', target: this.id, signal }, { kind: 'control' }).done;
    } catch (e) {
      // It exited between our look and the agent's: what kill wanted anyway.
      if (!(e instanceof ForkdError && e.details?.agent_code === 'no_such_request')) throw e;
    }
  }

  private checkStdin(): void {
    if (!this.hasStdin) throw badRequest('this exec was started without stdin: true');
  }

  private onMessage(msg: AgentMessage, command: string | undefined): void {
    switch (msg.type) {
      case 'started':
        this.pid.resolve(typeof msg.pid === 'number' ? msg.pid : -1);
        break;
      case 'stdout':
        this.handlers.onStdout?.(decodeData(msg));
        break;
      case 'stderr':
        this.handlers.onStderr?.(decodeData(msg));
        break;
      case 'result':
        if (!this.pid.settled) this.pid.reject(neverStarted());
        this.outcome.resolve(toResult(msg));
        break;
      case 'error':
        this.fail(agentError(msg, 'exec', command, { cwd: this.cwd, user: this.user }));
        break;
    }
  }

  private fail(err: unknown): void {
    this.pid.reject(err);
    this.outcome.reject(err);
  }

  private killOnAbort(signal: AbortSignal | undefined): void {
    if (!signal || this.ended) return;
    const onAbort = () => void this.kill().catch(() => {});
    if (signal.aborted) {
      void this.started.then(onAbort, () => {});
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    const disarm = () => signal.removeEventListener('abort', onAbort);
    this.result.then(disarm, disarm);
  }
}

/** Starts `req` on `conn`; failures to send surface through `started` and `result`. */
export function startExec(
  conn: AgentConnection,
  req: ExecRequest,
  handlers: ExecHandlers = {},
): ExecHandle {
  return new RunningExec(conn, req, handlers);
}
