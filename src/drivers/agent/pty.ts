/**
 * Terminal sessions in the guest (PROTOCOL.md `pty_open` … `pty_close`): a command on a
 * pseudo-terminal, whose output arrives as numbered bytes (`offset`), so a host that lost
 * its connection can attach again and ask for what it missed. An attachment is one request
 * id; input, resize, signal and close name it. The session itself lives in the agent and
 * outlives the attachment (and the agent connection): only its exit ends it.
 */
import { SIGNALS } from '../../contract/rules.js';
import { ForkdError } from '../../errors.js';
import { deferred, quiet, type AgentConnection } from './connection.js';
import { agentError, type ExecInputs } from './errors.js';
import { MAX_LIST_ENTRIES, decodeData, slices, type AgentMessage } from './wire.js';

/** The agent's bounds on a window size (columns and rows). */
export const PTY_MAX_SIZE = 1000;

export interface PtySize {
  cols: number;
  rows: number;
}

export interface PtyOpenRequest extends PtySize {
  argv: string[];
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
}

/** How an attachment ended: the command exited, or another attachment took over. */
export type PtyEnd =
  | {
      kind: 'exit';
      exitCode: number | null;
      signal: string | null;
      durationMs: number;
      /** Bytes the session produced in all. */
      offset: number;
    }
  | { kind: 'detached' };

export interface PtyHandlers {
  /** Output bytes; `offset` is the session-wide number of the chunk's first byte. */
  onData?(chunk: Buffer, offset: number): void;
}

export interface PtyAttachment {
  /** The agent's number for the session (stable across host connections). */
  readonly pty: number;
  readonly pid: number;
  /** The offset of the first byte this attachment delivers. */
  readonly offset: number;
  input(data: Buffer): Promise<void>;
  resize(size: PtySize): Promise<void>;
  /** To the terminal's foreground job, as a key would. */
  signal(name: string): Promise<void>;
  /** Hangs the terminal up: its shell is killed; `ended` then reports the exit. */
  close(): Promise<void>;
  /** Ends this attachment (`ended` says detached); the session keeps running. */
  detach(): Promise<void>;
  /** Rejects `agent_unreachable` when the connection went (the session keeps running). */
  readonly ended: Promise<PtyEnd>;
}

function badRequest(message: string, details?: Record<string, unknown>): ForkdError {
  return new ForkdError('bad_request', message, details);
}

/** Refuses locally what the agent would refuse, so the error names the field. */
export function checkPtySize(size: PtySize): void {
  for (const field of ['cols', 'rows'] as const) {
    const v = size[field];
    if (!Number.isInteger(v) || v < 1 || v > PTY_MAX_SIZE) {
      throw badRequest(`${field} must be an integer from 1 to ${PTY_MAX_SIZE}`, { field, [field]: v });
    }
  }
}

function checkOpen(req: PtyOpenRequest): void {
  const { argv, env } = req;
  if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== 'string')) {
    throw badRequest('argv must be a non-empty list of strings');
  }
  if (argv.length > MAX_LIST_ENTRIES || Object.keys(env ?? {}).length > MAX_LIST_ENTRIES) {
    throw badRequest(`argv and env take at most ${MAX_LIST_ENTRIES} entries each`);
  }
  checkPtySize(req);
}

function toEnd(msg: AgentMessage): PtyEnd {
  if (msg.detached === true) return { kind: 'detached' };
  return {
    kind: 'exit',
    exitCode: typeof msg.exit_code === 'number' ? msg.exit_code : null,
    signal: typeof msg.signal === 'string' ? msg.signal : null,
    durationMs: typeof msg.duration_ms === 'number' ? msg.duration_ms : 0,
    offset: typeof msg.offset === 'number' ? msg.offset : 0,
  };
}

const num = (v: unknown) => (typeof v === 'number' ? v : -1);

class Attachment implements PtyAttachment {
  pty = -1;
  pid = -1;
  offset = 0;
  readonly ended: Promise<PtyEnd>;
  readonly ready = deferred<this>();
  private readonly outcome = deferred<PtyEnd>();
  private id = 0;

  constructor(
    private readonly conn: AgentConnection,
    fields: { type: string } & Record<string, unknown>,
    private readonly handlers: PtyHandlers,
    private readonly subject: string | undefined,
    private readonly inputs: ExecInputs = {},
  ) {
    this.ended = quiet(this.outcome.promise);
    quiet(this.ready.promise);
    try {
      this.id = conn.open(fields, {
        onMessage: (msg) => this.onMessage(msg),
        fail: (err) => this.fail(err),
      });
    } catch (e) {
      this.fail(e);
    }
  }

  async input(data: Buffer): Promise<void> {
    for (const piece of slices(data)) {
      if (this.outcome.settled) return; // like a closed terminal: nowhere to go
      await this.conn.sendFlow({ type: 'pty_input', id: this.id, data: piece.toString('base64') });
    }
  }

  async resize(size: PtySize): Promise<void> {
    checkPtySize(size);
    await this.control({ type: 'pty_resize', cols: size.cols, rows: size.rows });
  }

  async signal(name: string): Promise<void> {
    if (!(SIGNALS as readonly string[]).includes(name)) {
      throw badRequest(`unknown signal ${name}; use one of ${SIGNALS.join(', ')}`, { signal: name });
    }
    await this.control({ type: 'pty_signal', signal: name });
  }

  async close(): Promise<void> {
    await this.control({ type: 'pty_close' });
  }

  async detach(): Promise<void> {
    await this.control({ type: 'pty_detach' });
  }

  /** A follow-up naming this attachment; one that already ended needs nothing. */
  private async control(fields: { type: string } & Record<string, unknown>): Promise<void> {
    if (this.outcome.settled) return;
    try {
      await this.conn.call({ ...fields, target: this.id }, { kind: 'control' }).done;
    } catch (e) {
      // It ended between our look and the agent's: nothing left to act on.
      if (!(e instanceof ForkdError && e.details?.agent_code === 'no_such_request')) throw e;
    }
  }

  private onMessage(msg: AgentMessage): void {
    switch (msg.type) {
      case 'started':
        this.pid = num(msg.pid);
        this.pty = num(msg.pty);
        this.offset = Math.max(0, num(msg.offset));
        this.ready.resolve(this);
        break;
      case 'data':
        this.handlers.onData?.(decodeData(msg), Math.max(0, num(msg.offset)));
        break;
      case 'result':
        if (!this.ready.settled) this.ready.reject(new ForkdError('guest_error', 'the guest agent ended a terminal session it never reported started'));
        this.outcome.resolve(toEnd(msg));
        break;
      case 'error':
        this.fail(agentError(msg, 'exec', this.subject, this.inputs));
        break;
    }
  }

  private fail(err: unknown): void {
    this.ready.reject(err);
    this.outcome.reject(err);
  }
}

/** Starts `req.argv` on a new terminal; resolves once the guest started it. */
export function openPty(
  conn: AgentConnection,
  req: PtyOpenRequest,
  handlers: PtyHandlers = {},
): Promise<PtyAttachment> {
  checkOpen(req);
  const fields = {
    type: 'pty_open',
    argv: req.argv,
    env: req.env,
    cwd: req.cwd,
    user: req.user,
    cols: req.cols,
    rows: req.rows,
  };
  const inputs = { cwd: req.cwd, user: req.user };
  return new Attachment(conn, fields, handlers, req.argv[0], inputs).ready.promise;
}

/**
 * Attaches to session `pty` (after a reconnect): output from `since` (or the oldest byte
 * the agent still holds, whichever is later) is replayed, then it goes on live. A session
 * the agent no longer has is `pty_session_not_found`.
 */
export async function attachPty(
  conn: AgentConnection,
  target: { pty: number; since?: number },
  handlers: PtyHandlers = {},
): Promise<PtyAttachment> {
  const fields = { type: 'pty_attach', pty: target.pty, since: target.since };
  try {
    return await new Attachment(conn, fields, handlers, undefined).ready.promise;
  } catch (e) {
    if (e instanceof ForkdError && e.details?.agent_code === 'no_such_request') {
      throw new ForkdError('pty_session_not_found', `no terminal session ${target.pty} in the guest: it ended, or never existed`, { pty: target.pty });
    }
    if (e instanceof ForkdError && e.details?.agent_code === 'bad_request') {
      throw badRequest(String(e.details.agent_message), { since: target.since });
    }
    throw e;
  }
}

/** One session as `pty_list` reports it. */
export interface PtySessionInfo {
  pty: number;
  pid: number;
  attached: boolean;
  exited: boolean;
  offset: number;
  ageMs: number;
}

/** The sessions the guest holds (`unsupported` on an agent from before `pty_list`). */
export async function listPtys(conn: AgentConnection): Promise<PtySessionInfo[]> {
  const r = await conn.call({ type: 'pty_list' }, { kind: 'control' }).done;
  const sessions = Array.isArray(r.sessions) ? (r.sessions as Record<string, unknown>[]) : [];
  return sessions.map((s) => ({
    pty: num(s.pty),
    pid: num(s.pid),
    attached: s.attached === true,
    exited: s.exited === true,
    offset: Math.max(0, num(s.offset)),
    ageMs: Math.max(0, num(s.age_ms)),
  }));
}
