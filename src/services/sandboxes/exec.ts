/**
 * Commands in a sandbox, from the REST shapes to the agent driver and back: buffered
 * (base64 output in one answer) or streamed (events as the agent sends them, with an exec
 * id for stdin and signals). A streamed command whose reader goes away is killed. A command
 * that names no cwd or user gets its image's WorkingDir and User (`withExecDefaults`).
 */
import { randomBytes } from 'node:crypto';
import type { ExecRequestT, ExecResultT } from '../../contract/schemas.js';
import type {
  AgentClient,
  ExecHandle,
  ExecRequest,
  ExecResult,
} from '../../drivers/agent/client.js';
import { ForkdError } from '../../errors.js';
import type { ExecStream } from '../contracts.js';
import { EventQueue } from '../../util/queue.js';

type ExecEvent = ExecStream['events'] extends AsyncIterable<infer E> ? E : never;

/** A new exec id: `ex-` and 12 hex digits. */
export function newExecId(): string {
  return `ex-${randomBytes(6).toString('hex')}`;
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Strict base64 (Buffer.from would silently skip junk and run a command on the rest). */
export function decodeBase64(field: string, text: string): Buffer {
  if (!BASE64.test(text)) throw new ForkdError('bad_request', `${field} must be base64`, { field });
  return Buffer.from(text, 'base64');
}

/** A request with `defaults` (its image's WorkingDir and User) where it names none. */
export function withExecDefaults<R extends { cwd?: string; user?: string }>(
  req: R,
  defaults: { cwd?: string; user?: string },
): R {
  const cwd = req.cwd ?? defaults.cwd;
  const user = req.user ?? defaults.user;
  return { ...req, ...(cwd ? { cwd } : {}), ...(user ? { user } : {}) };
}

function agentRequest(req: ExecRequestT): ExecRequest {
  return { argv: req.argv, env: req.env, cwd: req.cwd, user: req.user, timeoutMs: req.timeout_ms };
}

function exitFields(r: ExecResult) {
  return {
    exit_code: r.exitCode,
    signal: r.signal,
    timed_out: r.timedOut,
    duration_ms: r.durationMs,
  };
}

/** Run to the end with output buffered; a non-zero exit is a result, not an error. */
export async function runBuffered(agent: AgentClient, req: ExecRequestT): Promise<ExecResultT> {
  if (req.keep_stdin_open) {
    throw new ForkdError('bad_request', 'keep_stdin_open needs stream: true', {
      field: 'keep_stdin_open',
    });
  }
  const stdinData = req.stdin === undefined ? undefined : decodeBase64('stdin', req.stdin);
  const r = await agent.run({ ...agentRequest(req), stdinData });
  return {
    ...exitFields(r),
    stdout: r.stdout.toString('base64'),
    stderr: r.stderr.toString('base64'),
  };
}

/** A started streaming exec: what the route reads, and the handle for follow-ups. */
export interface StreamingExec {
  stream: ExecStream;
  handle: ExecHandle;
}

/**
 * Start a streamed exec. Resolves once the guest started the command, so a missing command
 * is an error of this call (before any event was sent), not an event.
 */
export async function startStreaming(
  agent: AgentClient,
  req: ExecRequestT,
): Promise<StreamingExec> {
  const stdinData = req.stdin === undefined ? undefined : decodeBase64('stdin', req.stdin);
  const keepOpen = req.keep_stdin_open === true;
  const queue = new EventQueue<ExecEvent>(() => void handle.kill().catch(() => undefined));
  const handle = agent.exec(
    { ...agentRequest(req), stdin: keepOpen || stdinData !== undefined },
    {
      onStdout: (data) => queue.push({ type: 'stdout', data }),
      onStderr: (data) => queue.push({ type: 'stderr', data }),
    },
  );
  handle.result.then(
    (r) => {
      queue.push({ type: 'exit', ...exitFields(r) });
      queue.close();
    },
    (e: unknown) => queue.close(e),
  );
  if (stdinData !== undefined) void feedStdin(handle, stdinData, !keepOpen);
  await handle.started;
  return { handle, stream: { execId: newExecId(), pid: handle.started, events: queue } };
}

/** Like a pipe: a command that exits before reading all its input is not an error. */
async function feedStdin(handle: ExecHandle, data: Buffer, eof: boolean): Promise<void> {
  try {
    await handle.writeStdin(data);
    if (eof) await handle.endStdin();
  } catch {
    // the command is gone; its result says how it ended
  }
}
