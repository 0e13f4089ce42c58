/**
 * The REST contract, ids, names, labels, environment and the error body every route shares.
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type from 'typebox';
import {
  ENV_MAX,
  ENV_NAME_PATTERN,
  EXEC_ID_PATTERN,
  LABEL_KEY_PATTERN,
  LABELS_MAX,
  NAME_PATTERN,
  SANDBOX_ID_PATTERN,
} from '../rules.js';

/** Ids and names: no `/`, `..`, NUL or whitespace; bounded length. */
export const SandboxId = Type.String({ pattern: SANDBOX_ID_PATTERN, description: 'sandbox id' });
export const ImageName = Type.String({
  pattern: NAME_PATTERN,
  description: 'image name',
});
export const ExecId = Type.String({
  pattern: EXEC_ID_PATTERN,
  description: 'exec id (streaming exec)',
});
/** An absolute guest path, at most 4096 bytes, no NUL. */
export const GuestPath = Type.String({ pattern: '^/[^\\u0000]*$', maxLength: 4096 });

export const LabelKey = LABEL_KEY_PATTERN;
export const Labels = Type.Record(
  Type.String({ pattern: LabelKey }),
  Type.String({ maxLength: LABELS_MAX.valueLength }),
  {
    maxProperties: LABELS_MAX.count,
    additionalProperties: false,
    description: 'free-form key → value labels',
  },
);
const EnvName = ENV_NAME_PATTERN;
export const Env = Type.Record(
  Type.String({ pattern: EnvName }),
  Type.String({ maxLength: ENV_MAX.valueLength }),
  {
    maxProperties: ENV_MAX.count,
    additionalProperties: false,
  },
);

// ---- errors ---------------------------------------------------------------------------

export const ErrorBody = Type.Object(
  {
    error: Type.Object({
      code: Type.String(),
      message: Type.String(),
      details: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    }),
  },
  { $id: 'Error' },
);
