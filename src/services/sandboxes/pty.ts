/**
 * Terminal sessions in a sandbox, from the REST shape (GET /pty's query) to the agent driver:
 * what a new session runs by default, its TERM, the session id the client keeps
 * (`pty-<agent's number>`: the agent holds the session, so a daemon restarted in between can
 * still reattach it), and the mapping of the driver's attachment to the service's.
 */
import { PTY_LOGIN_SHELL } from '../../contract/rules.js';
import type { PtyQueryT, PtySessionT } from '../../contract/schemas.js';
import type {
  AgentClient,
  PtyAttachment as AgentPty,
  PtyEnd as AgentEnd,
} from '../../drivers/agent/client.js';
import { ForkdError } from '../../errors.js';
import type { PtyAttachment, PtyEnd } from '../contracts.js';

export const DEFAULT_TERM = 'xterm-256color';
export const DEFAULT_SIZE = { cols: 80, rows: 24 } as const;

const SESSION = /^pty-([0-9]{1,15})$/;

export function sessionId(pty: number): string {
  return `pty-${pty}`;
}

function sessionNumber(session: string): number {
  const m = SESSION.exec(session);
  if (!m) {
    throw new ForkdError('bad_request', `session ${session} is not a terminal session id (pty-N)`, {
      field: 'session',
    });
  }
  return Number(m[1]);
}

/** Fields that only make sense for a new session are refused on a reattach. */
function checkReattach(req: PtyQueryT): void {
  const extra = (['cmd', 'cwd', 'user', 'term'] as const).filter((k) => req[k] !== undefined);
  if (extra.length > 0) {
    throw new ForkdError(
      'bad_request',
      `${extra.join(', ')} cannot be given with session: a reattach joins the session as it runs`,
      { field: extra[0] },
    );
  }
}

function toEnd(end: AgentEnd): PtyEnd {
  if (end.kind === 'detached') return { type: 'detached' };
  return {
    type: 'exit',
    exit_code: end.exitCode,
    signal: end.signal,
    duration_ms: end.durationMs,
    offset: end.offset,
  };
}

function wrap(a: AgentPty): PtyAttachment {
  return {
    session: sessionId(a.pty),
    pid: a.pid,
    offset: a.offset,
    input: (data) => a.input(data),
    resize: (cols, rows) => a.resize({ cols, rows }),
    signal: (name) => a.signal(name),
    kill: () => a.close(),
    detach: () => a.detach(),
    ended: a.ended.then(toEnd),
  };
}

/**
 * Opens a session (no `session` in the request) or reattaches one. A resize on reattach
 * (cols and rows given) is applied at once, since the new client's window is what counts.
 */
export async function openOrAttach(
  agent: AgentClient,
  req: PtyQueryT,
  onData: (chunk: Buffer, offset: number) => void,
): Promise<PtyAttachment> {
  const handlers = { onData };
  if (req.session !== undefined) {
    checkReattach(req);
    const pty = sessionNumber(req.session);
    const a = await agent.attachPty({ pty, since: req.since }, handlers);
    if (req.cols !== undefined && req.rows !== undefined) {
      await a.resize({ cols: req.cols, rows: req.rows });
    }
    return wrap(a);
  }
  if (req.since !== undefined) {
    throw new ForkdError(
      'bad_request',
      'since needs session: it is an offset in an existing session',
      {
        field: 'since',
      },
    );
  }
  const a = await agent.openPty(
    {
      argv: ['/bin/sh', '-c', req.cmd ?? PTY_LOGIN_SHELL],
      env: { TERM: req.term ?? DEFAULT_TERM },
      cwd: req.cwd,
      user: req.user,
      cols: req.cols ?? DEFAULT_SIZE.cols,
      rows: req.rows ?? DEFAULT_SIZE.rows,
    },
    handlers,
  );
  return wrap(a);
}

/** The sessions the guest holds, under the ids clients reattach with. */
export async function listSessions(agent: AgentClient): Promise<PtySessionT[]> {
  return (await agent.listPtys()).map((p) => ({
    session: sessionId(p.pty),
    pid: p.pid,
    attached: p.attached,
    exited: p.exited,
    offset: p.offset,
    age_ms: p.ageMs,
  }));
}
