/**
 * Turns the agent's error replies and the channel's own failures into catalog errors. The
 * same agent code means different things per request (`not_found` is a missing command for
 * exec but a missing path for file ops), hence the request kind; for an exec the agent's
 * `field` says which input it was (a missing cwd or user is not a missing command).
 */
import { ForkdError } from '../../errors.js';
import type { AgentMessage } from './wire.js';

/** What a request was about, which decides how `not_found` reads. */
export type RequestKind = 'exec' | 'file' | 'control';

/** Agent codes that mean "this does not exist (as a directory)" for an exec's cwd. */
const MISSING_DIR = new Set(['not_found', 'not_dir']);

/**
 * An exec refused for its cwd or user (the agent names the field; agents before that
 * field said not_found for both, which then still reads as a missing command).
 */
function execInputError(
  msg: AgentMessage,
  agentCode: string,
  details: Record<string, unknown>,
  inputs: ExecInputs,
): ForkdError | undefined {
  const said = typeof msg.message === 'string' && msg.message ? ` (${msg.message})` : '';
  if (msg.field === 'cwd' && MISSING_DIR.has(agentCode)) {
    const cwd = inputs.cwd ?? '';
    return new ForkdError(
      'cwd_not_found',
      `working directory ${cwd}: no such directory in the sandbox${said}`,
      { ...details, cwd },
    );
  }
  if (msg.field === 'user' && agentCode === 'not_found') {
    const user = inputs.user ?? '';
    return new ForkdError(
      'user_not_found',
      `user ${user}: not in the sandbox image's /etc/passwd (a numeric uid always runs)`,
      { ...details, user },
    );
  }
  return undefined;
}

/** What an exec asked for, to name in errors about its inputs. */
export interface ExecInputs {
  cwd?: string;
  user?: string;
}

/** The catalog error for an agent `error` reply. */
export function agentError(
  msg: AgentMessage,
  kind: RequestKind,
  subject?: string,
  inputs: ExecInputs = {},
): ForkdError {
  const agentCode = typeof msg.code === 'string' ? msg.code : 'unknown';
  const agentMessage = typeof msg.message === 'string' ? msg.message : '';
  const details = {
    agent_code: agentCode,
    agent_message: agentMessage,
    ...(subject === undefined ? {} : { subject }),
    ...(typeof msg.field === 'string' ? { agent_field: msg.field } : {}),
  };
  const about = subject === undefined ? '' : `${subject}: `;
  const said = agentMessage ? ` (${agentMessage})` : '';
  const input = kind === 'exec' ? execInputError(msg, agentCode, details, inputs) : undefined;
  if (input) return input;
  if (agentCode === 'not_found' && kind === 'exec') {
    return new ForkdError(
      'command_not_found',
      `${about}no such command in the sandbox image; check argv[0] and PATH${said}`,
      details,
    );
  }
  if (agentCode === 'not_found' && kind === 'file') {
    return new ForkdError('guest_file_not_found', `${about}no such file or directory in the sandbox`, details);
  }
  if (agentCode === 'permission') {
    return new ForkdError(
      'guest_permission_denied',
      `${about}permission denied in the sandbox${said}`,
      details,
    );
  }
  return new ForkdError(
    'guest_error',
    `${about}the guest agent reported ${agentCode}${agentMessage ? `: ${agentMessage}` : ''}`,
    details,
  );
}

/** The channel is gone or was reset: every request in flight ends with this. */
export function unreachable(why: string, details?: Record<string, unknown>): ForkdError {
  return new ForkdError(
    'agent_unreachable',
    `the guest agent connection ${why}; reconnect, or check the sandbox's console log`,
    details,
  );
}

/** A per-call deadline passed. */
export function timedOut(what: string, timeoutMs: number): ForkdError {
  return new ForkdError('timeout', `${what} did not finish within ${timeoutMs} ms`, {
    timeoutMs,
  });
}

/**
 * A request type the sandbox's agent does not know (it advertises its types at sync): the
 * agent is older than this host, typically frozen inside a snapshot made by an older forkd.
 */
export function unsupported(type: string, agentVersion: string): ForkdError {
  return new ForkdError(
    'unsupported',
    `the guest agent of this sandbox (${agentVersion || 'an older version'}) does not know "${type}" requests; recreate the snapshot or image with this forkd to use it`,
    { type, agentVersion },
  );
}
