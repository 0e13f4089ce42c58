/**
 * envd's PTY sessions (`sbx.pty`: process.Process/Start with a `pty` field) on forkd's
 * terminals: the SDK's `/bin/bash -i -l` with its envs runs in a terminal session of the
 * guest agent sized as asked; its output is envd's `data.pty`, its input SendInput's `pty`
 * bytes, Update's `pty.size` a resize, and a signal hangs the terminal up (the shell ends,
 * as E2B's SIGKILL ends it). The listener keeps the attachment for the session's life, so
 * a client that disconnects and connects again (pty.connect) watches the same session.
 */
import type { PtyAttachment, PtyEnd, Services } from '../../services/contracts.js';
import { ConnectFailure, objectField, uintField } from './wire.js';

export interface PtySize {
  cols: number;
  rows: number;
}

/** What envd's Start and Update carry about the terminal: `pty.size`, if there is a `pty`. */
export function ptySize(value: unknown): PtySize | undefined {
  if (value === undefined || value === null) return undefined;
  const size = objectField(objectField(value, 'pty').size, 'pty.size');
  const cols = uintField(size, 'cols') ?? 80;
  const rows = uintField(size, 'rows') ?? 24;
  if (cols < 1 || rows < 1 || cols > 1000 || rows > 1000) {
    throw new ConnectFailure('invalid_argument', 'pty.size: cols and rows must be 1 to 1000');
  }
  return { cols, rows };
}

const quote = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The terminal's shell line: the command with its envs (`exec env K=V … cmd args`). */
export function ptyCommand(cmd: string, args: string[], envs: Record<string, string>): string {
  const bad = Object.keys(envs).find((k) => !ENV_NAME.test(k));
  if (bad !== undefined) {
    throw new ConnectFailure(
      'invalid_argument',
      `envs: ${bad.slice(0, 64)} is not a variable name`,
    );
  }
  const assigns = Object.entries(envs).map(([k, v]) => quote(`${k}=${v}`));
  return ['exec', 'env', ...assigns, quote(cmd), ...args.map(quote)].join(' ');
}

const TERM = /^[A-Za-z0-9._+-]{1,64}$/;

/** Open the terminal session; `onData` gets its output from the first byte. */
export function openPty(
  services: Services,
  sandbox: string,
  spec: { cmd: string; args: string[]; envs: Record<string, string>; cwd?: string; user?: string },
  size: PtySize,
  onData: (chunk: Buffer) => void,
): Promise<PtyAttachment> {
  const term = spec.envs.TERM;
  return services.sandboxes.pty(
    sandbox,
    {
      ...size,
      cmd: ptyCommand(spec.cmd, spec.args, spec.envs),
      ...(spec.cwd !== undefined && { cwd: spec.cwd }),
      ...(spec.user !== undefined && { user: spec.user }),
      ...(term !== undefined && TERM.test(term) && { term }),
    },
    (chunk) => onData(chunk),
  );
}

/** A terminal's end as envd's `end` event (a detach is not an end: the session runs on). */
export function ptyEndEvent(end: PtyEnd): unknown {
  if (end.type === 'detached') {
    return { event: { end: { exitCode: -1, exited: false, status: 'detached' } } };
  }
  const signalled = end.exit_code === null;
  const name = end.signal?.replace(/^SIG/, '').toLowerCase() ?? 'killed';
  return {
    event: {
      end: {
        exitCode: signalled ? -1 : end.exit_code,
        exited: !signalled,
        status: signalled ? `signal: ${name}` : `exit status ${end.exit_code}`,
      },
    },
  };
}

/** Output as envd's `data.pty` event. */
export const ptyDataEvent = (chunk: Buffer): unknown => ({
  event: { data: { pty: chunk.toString('base64') } },
});
