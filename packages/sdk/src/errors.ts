/**
 * The one error catalog of forkd: every error any layer reports has a stable `code`, one
 * HTTP status, and a message that says what to do next. The daemon, CLI and SDK share it.
 */

/** Every catalog entry: code → HTTP status and a one-line meaning (used in docs). */
export const ERROR_CATALOG = {
  bad_request: { status: 400, meaning: 'The request is malformed or a value is out of range.' },
  unauthorized: { status: 401, meaning: 'No bearer token, or a wrong one.' },
  not_found: { status: 404, meaning: 'No such route.' },
  image_not_found: { status: 404, meaning: 'No image with that name.' },
  sandbox_not_found: { status: 404, meaning: 'No sandbox with that id.' },
  guest_file_not_found: { status: 404, meaning: 'The path does not exist inside the sandbox.' },
  guest_permission_denied: { status: 403, meaning: 'The guest refused access to the path.' },
  name_taken: { status: 409, meaning: 'Something already exists under that name.' },
  command_not_found: { status: 422, meaning: 'The command does not exist in the sandbox image.' },
  setup_required: { status: 503, meaning: 'A host prerequisite is missing: run `forkd doctor`.' },
  capacity: { status: 503, meaning: 'Too many concurrent operations; retry later.' },
  boot_failed: { status: 500, meaning: 'The microVM did not come up; the console log says why.' },
  agent_unreachable: { status: 502, meaning: 'The guest agent did not answer.' },
  guest_error: { status: 500, meaning: 'The guest agent reported an error.' },
  timeout: { status: 504, meaning: 'The operation did not finish in time.' },
  internal: { status: 500, meaning: 'An unexpected failure inside forkd.' },
} as const;

/** A stable error code from {@link ERROR_CATALOG}. */
export type ErrorCode = keyof typeof ERROR_CATALOG;

/**
 * The error every forkd layer throws: a catalog code, a message saying what to do next,
 * and optional structured details.
 *
 * @example
 * try { await sandbox.files.read('/nope'); }
 * catch (e) { if (e instanceof ForkdError && e.code === 'guest_file_not_found') ... }
 */
export class ForkdError extends Error {
  /** The HTTP status the catalog maps this code to. */
  readonly status: number;

  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'ForkdError';
    this.status = ERROR_CATALOG[code].status;
  }

  /** The wire form: `{ error: { code, message, details } }`. */
  toJSON(): { error: { code: ErrorCode; message: string; details?: Record<string, unknown> } } {
    return { error: { code: this.code, message: this.message, details: this.details } };
  }
}

/** True when `e` is a {@link ForkdError} with the given code. */
export function isForkdError(e: unknown, code?: ErrorCode): e is ForkdError {
  return e instanceof ForkdError && (code === undefined || e.code === code);
}
