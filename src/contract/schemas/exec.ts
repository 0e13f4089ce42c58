/**
 * The REST contract, commands run in a sandbox: the request, the buffered answer, the streamed events.
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type, { type Static } from 'typebox';
import { between, strict } from './build.js';
import { LIMITS, SIGNALS, USER_PATTERN } from '../rules.js';
import { Env, ErrorBody, ExecId, GuestPath, SandboxId } from './common.js';

export const ExecRequest = Type.Object(
  {
    argv: Type.Array(Type.String({ maxLength: 131072 }), { minItems: 1, maxItems: 4096 }),
    env: Type.Optional(Env),
    cwd: Type.Optional(GuestPath),
    user: Type.Optional(Type.String({ pattern: USER_PATTERN })),
    timeout_ms: Type.Optional(Type.Integer(between(LIMITS.execTimeoutMs))),
    stdin: Type.Optional(
      Type.String({
        pattern: '^[A-Za-z0-9+/]*={0,2}$',
        description: 'base64 bytes given to stdin, then EOF',
      }),
    ),
    stream: Type.Optional(
      Type.Boolean({ description: 'answer with NDJSON events as output is produced' }),
    ),
    keep_stdin_open: Type.Optional(
      Type.Boolean({
        description: 'streaming only: stdin stays open for POST /execs/:exec_id/stdin',
      }),
    ),
  },
  strict,
);
export type ExecRequestT = Static<typeof ExecRequest>;

/** Buffered exec answer. stdout/stderr are base64. */
export const ExecResult = Type.Object(
  {
    exit_code: Type.Union([Type.Integer(), Type.Null()]),
    signal: Type.Union([Type.String(), Type.Null()]),
    timed_out: Type.Boolean(),
    duration_ms: Type.Number(),
    stdout: Type.String({ description: 'base64' }),
    stderr: Type.String({ description: 'base64' }),
  },
  { $id: 'ExecResult' },
);
export type ExecResultT = Static<typeof ExecResult>;

/**
 * Streaming exec answer (application/x-ndjson), one event per line:
 * {"type":"started","exec_id","pid"} · {"type":"stdout"|"stderr","data":base64} ·
 * {"type":"exit","exit_code","signal","timed_out","duration_ms"} · {"type":"error","error":{code,message}}
 */
export const ExecEvent = Type.Union(
  [
    Type.Object({ type: Type.Literal('started'), exec_id: ExecId, pid: Type.Integer() }),
    Type.Object({ type: Type.Literal('stdout'), data: Type.String() }),
    Type.Object({ type: Type.Literal('stderr'), data: Type.String() }),
    Type.Object({
      type: Type.Literal('exit'),
      exit_code: Type.Union([Type.Integer(), Type.Null()]),
      signal: Type.Union([Type.String(), Type.Null()]),
      timed_out: Type.Boolean(),
      duration_ms: Type.Number(),
    }),
    Type.Object({ type: Type.Literal('error'), error: ErrorBody.properties.error }),
  ],
  { $id: 'ExecEvent' },
);
export type ExecEventT = Static<typeof ExecEvent>;

export const ExecParams = Type.Object({ id: SandboxId, exec_id: ExecId }, strict);
export const StdinQuery = Type.Object({ eof: Type.Optional(Type.Boolean()) }, strict);
export const KillExec = Type.Object(
  {
    signal: Type.Optional(Type.Union(SIGNALS.map((s) => Type.Literal(s)))),
  },
  strict,
);
