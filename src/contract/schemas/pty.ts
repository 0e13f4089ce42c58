/**
 * The REST contract, terminal sessions (GET /v1/sandboxes/:id/pty, a WebSocket).
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type, { type Static } from 'typebox';
import { between, strict } from './build.js';
import { LIMITS, USER_PATTERN } from '../rules.js';
import { GuestPath } from './common.js';

/** A terminal session's id: `pty-` and the guest agent's session number. */
export const PtySessionId = Type.String({ pattern: '^pty-[0-9]{1,15}$' });

/** Opening (cols, rows, cmd…) or reattaching (session, since) a terminal session. */
export const PtyQuery = Type.Object(
  {
    cols: Type.Optional(Type.Integer(between(LIMITS.ptySize))),
    rows: Type.Optional(Type.Integer(between(LIMITS.ptySize))),
    cmd: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 65536,
        description: 'run by /bin/sh -c; default: a login shell (bash if the image has it)',
      }),
    ),
    cwd: Type.Optional(GuestPath),
    user: Type.Optional(Type.String({ pattern: USER_PATTERN })),
    term: Type.Optional(
      Type.String({
        pattern: '^[A-Za-z0-9._+-]{1,64}$',
        description: 'TERM (default xterm-256color)',
      }),
    ),
    session: Type.Optional(PtySessionId),
    since: Type.Optional(
      Type.Integer({ minimum: 0, description: 'reattach: replay output from this byte offset' }),
    ),
  },
  strict,
);
export type PtyQueryT = Static<typeof PtyQuery>;

/** One terminal session the guest holds (GET /v1/sandboxes/:id/pty without an upgrade). */
export const PtySession = Type.Object(
  {
    session: PtySessionId,
    pid: Type.Integer({ description: "its command's pid in the guest" }),
    attached: Type.Boolean({ description: 'a client watches it now' }),
    exited: Type.Boolean({
      description: 'its command ended; the exit waits for an attachment to report it',
    }),
    offset: Type.Integer({ minimum: 0, description: 'bytes of output produced so far' }),
    age_ms: Type.Integer({ minimum: 0 }),
  },
  { $id: 'PtySession' },
);
export type PtySessionT = Static<typeof PtySession>;
export const PtySessionList = Type.Object({ sessions: Type.Array(PtySession) });
