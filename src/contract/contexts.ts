/**
 * The REST contract of code contexts and eval (TypeBox, like schemas.ts): a context is a
 * warm interpreter in the guest; an eval runs code in one and answers an Execution (E2B's
 * shape: results keyed by MIME type, logs, error) or, with stream:true, NDJSON events.
 */
import Type, { type Static } from 'typebox';
import { FORK_MAX, LIMITS, NAME_PATTERN } from './rules.js';
import { Env, ErrorBody, GuestPath, SandboxId } from './schemas.js';

const strict = { additionalProperties: false } as const;

export const ContextName = Type.String({
  pattern: NAME_PATTERN,
  description: 'context name (a-z, 0-9, ".", "_", "-")',
});
export const ContextLanguage = Type.Union([Type.Literal('python'), Type.Literal('node')], {
  description: 'the interpreter: python (python3) or node',
});
/** The context an eval uses when it names none; created on first use. */
export const DEFAULT_CONTEXT = 'python';

/**
 * A context named after a language ("python", "node") runs that language unless told
 * otherwise, and is made on an eval's first use; any other name is Python by default.
 */
export function languageOfName(name: string): ContextLanguageT | undefined {
  return name === 'python' || name === 'node' ? name : undefined;
}
export const DEFAULT_EVAL_TIMEOUT_MS = 300_000;

export const Context = Type.Object({
  name: ContextName,
  language: ContextLanguage,
  cwd: Type.String(),
  env: Type.Record(Type.String(), Type.String()),
  pid: Type.Integer({ description: 'the interpreter process in the guest' }),
  created_at: Type.String(),
  alive: Type.Boolean({ description: 'false when its process died: restart it' }),
});

export const CreateContext = Type.Object(
  {
    name: Type.Optional(ContextName),
    language: Type.Optional(ContextLanguage),
    cwd: Type.Optional(GuestPath),
    env: Type.Optional(Env),
  },
  strict,
);

export const ContextParams = Type.Object({ id: SandboxId, name: ContextName }, strict);

const Code = Type.String({ maxLength: 1048576, description: 'source code to run' });
const EvalTimeout = Type.Integer({
  ...{ minimum: LIMITS.execTimeoutMs.min, maximum: LIMITS.execTimeoutMs.max },
  description: 'interrupt the code after this long (default 300000); the context lives on',
});

export const EvalRequest = Type.Object(
  {
    code: Code,
    context: Type.Optional(ContextName),
    timeout_ms: Type.Optional(EvalTimeout),
    stream: Type.Optional(
      Type.Boolean({ description: 'answer with NDJSON events as the code runs' }),
    ),
  },
  strict,
);

/** One rich output: MIME type → value (text, base64 for images, JSON for application/json). */
export const EvalResult = Type.Object({
  is_main_result: Type.Boolean({ description: "the value of the cell's last expression" }),
  data: Type.Record(Type.String(), Type.Unknown()),
});

export const EvalError = Type.Object({
  name: Type.String(),
  value: Type.String(),
  traceback: Type.String(),
});

export const Execution = Type.Object({
  results: Type.Array(EvalResult),
  logs: Type.Object({ stdout: Type.Array(Type.String()), stderr: Type.Array(Type.String()) }),
  error: Type.Union([EvalError, Type.Null()]),
  text: Type.Union([Type.String(), Type.Null()], {
    description: "the main result's text/plain",
  }),
  execution_count: Type.Integer(),
  duration_ms: Type.Number(),
});

/**
 * Streaming eval (application/x-ndjson): {"type":"stdout"|"stderr","text"} while it runs,
 * {"type":"result","is_main_result","data"}, {"type":"error","name","value","traceback"}
 * (the code raised), then {"type":"end","execution_count","duration_ms"}; a failure of the
 * daemon or guest after the stream began is a last {"type":"failed","error":{code,message}}.
 */
export const EvalEvent = Type.Union([
  Type.Object({
    type: Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]),
    text: Type.String(),
  }),
  Type.Object({ type: Type.Literal('result'), ...EvalResult.properties }),
  Type.Object({ type: Type.Literal('error'), ...EvalError.properties }),
  Type.Object({
    type: Type.Literal('end'),
    execution_count: Type.Integer(),
    duration_ms: Type.Number(),
  }),
  Type.Object({ type: Type.Literal('failed'), error: ErrorBody.properties.error }),
]);

export const EvalForkRequest = Type.Object(
  {
    variants: Type.Array(Code, { minItems: 1, maxItems: FORK_MAX }),
    context: Type.Optional(ContextName),
    timeout_ms: Type.Optional(EvalTimeout),
    keep: Type.Optional(
      Type.Boolean({ description: 'keep the children running (default: killed after the eval)' }),
    ),
  },
  strict,
);

export const EvalForkResult = Type.Object({
  snapshot: Type.String({ description: 'the branch the children were forked from' }),
  results: Type.Array(
    Type.Object({
      index: Type.Integer(),
      sandbox: Type.Union([SandboxId, Type.Null()]),
      execution: Type.Union([Execution, Type.Null()]),
      failure: Type.Union([ErrorBody.properties.error, Type.Null()], {
        description: 'why this variant has no execution (its child failed to start, …)',
      }),
    }),
  ),
});

export type ContextLanguageT = Static<typeof ContextLanguage>;
export type ContextT = Static<typeof Context>;
export type CreateContextT = Static<typeof CreateContext>;
export type EvalRequestT = Static<typeof EvalRequest>;
export type EvalResultT = Static<typeof EvalResult>;
export type EvalErrorT = Static<typeof EvalError>;
export type ExecutionT = Static<typeof Execution>;
export type EvalEventT = Static<typeof EvalEvent>;
export type EvalForkRequestT = Static<typeof EvalForkRequest>;
export type EvalForkResultT = Static<typeof EvalForkResult>;
