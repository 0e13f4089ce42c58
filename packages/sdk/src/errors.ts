/**
 * The one error catalog of forkd: every error any layer reports has a stable `code`, one
 * HTTP status, and a message that says what to do next. The daemon, CLI and SDK share it.
 * The SDK's error classes (one per code) are generated from the catalog's names, so a code
 * added here gets its class without anyone writing it.
 */

/**
 * Every catalog entry: code → HTTP status and a one-line meaning (used in docs).
 *
 * @example
 * ERROR_CATALOG.sandbox_not_found.status; // 404
 */
export const ERROR_CATALOG = {
  bad_request: { status: 400, meaning: 'The request is malformed or a value is out of range.' },
  unauthorized: { status: 401, meaning: 'No bearer token, or a wrong one.' },
  not_found: { status: 404, meaning: 'No such route.' },
  image_not_found: { status: 404, meaning: 'No image with that name.' },
  sandbox_not_found: { status: 404, meaning: 'No sandbox with that id.' },
  sandbox_not_running: {
    status: 409,
    meaning: 'The sandbox is still starting, or has stopped or died: it cannot do that now.',
  },
  sandbox_broken: {
    status: 409,
    meaning:
      "The sandbox's disk chain could not be repaired after an interrupted branch: restart the daemon to retry, or kill it.",
  },
  exec_not_found: { status: 404, meaning: 'No running exec with that id in this sandbox.' },
  context_not_found: {
    status: 404,
    meaning: 'No code context with that name in this sandbox: list them, or create it first.',
  },
  pty_session_not_found: {
    status: 404,
    meaning:
      'No terminal session with that id in this sandbox (it ended and was reported, or never existed).',
  },
  snapshot_not_found: { status: 404, meaning: 'No snapshot with that tag.' },
  snapshot_not_bootable: {
    status: 409,
    meaning: 'The snapshot is missing a file or a file changed size: it cannot be restored.',
  },
  snapshot_broken: {
    status: 409,
    meaning:
      "A layer of the snapshot's disk chain is missing or is not the one its manifest records: it cannot be forked.",
  },
  snapshot_failed: {
    status: 409,
    meaning:
      'The snapshot was never finished (a branch cut off or failed): it has no files and can only be removed.',
  },
  snapshot_writing: {
    status: 409,
    meaning:
      'The snapshot is still being written (a branch that did not wait): retry once it is ready.',
  },
  snapshot_in_use: {
    status: 409,
    meaning: 'Sandboxes or other snapshots depend on the snapshot; remove them first or force.',
  },
  image_in_use: {
    status: 409,
    meaning: 'Snapshots or sandboxes use the image; remove or kill them first.',
  },
  guest_file_not_found: { status: 404, meaning: 'The path does not exist inside the sandbox.' },
  guest_permission_denied: { status: 403, meaning: 'The guest refused access to the path.' },
  name_taken: { status: 409, meaning: 'Something already exists under that name.' },
  payload_too_large: { status: 413, meaning: 'The request body is larger than the route takes.' },
  unsupported_media_type: {
    status: 415,
    meaning:
      'Wrong Content-Type: JSON routes take application/json, uploads application/octet-stream.',
  },
  command_not_found: { status: 422, meaning: 'The command does not exist in the sandbox image.' },
  cwd_not_found: {
    status: 422,
    meaning:
      'The working directory of a command does not exist in the sandbox (or is no directory).',
  },
  user_not_found: {
    status: 422,
    meaning: "The user a command should run as is not in the sandbox image's /etc/passwd.",
  },
  unsupported: {
    status: 501,
    meaning:
      "The sandbox's guest agent is older than this forkd and does not know the request; recreate its snapshot or image.",
  },
  setup_required: { status: 503, meaning: 'A host prerequisite is missing: run `forkd doctor`.' },
  capacity: { status: 503, meaning: 'Too many concurrent operations; retry later.' },
  daemon_unreachable: {
    status: 503,
    meaning:
      'A client could not reach the forkd daemon: start it with `forkd daemon` or set FORKD_URL. Raised by clients, never sent by the daemon.',
  },
  boot_failed: { status: 500, meaning: 'The microVM did not come up; the console log says why.' },
  agent_unreachable: { status: 502, meaning: 'The guest agent did not answer.' },
  guest_error: { status: 500, meaning: 'The guest agent reported an error.' },
  timeout: { status: 504, meaning: 'The operation did not finish in time.' },
  build_failed: {
    status: 422,
    meaning:
      "A build step failed (a command's non-zero exit, a process never ready): the steps before it stay cached, nothing is published under the tag.",
  },
  internal: { status: 500, meaning: 'An unexpected failure inside forkd.' },
  port_unreachable: {
    status: 502,
    meaning: 'Nothing in the sandbox answered on that port (no server listens there).',
  },
  reference_not_found: {
    status: 404,
    meaning: 'The registry or archive has no such repository, tag or digest.',
  },
  registry_unauthorized: {
    status: 403,
    meaning:
      'The registry refused access: log in with `forkd login REGISTRY` (or check the credentials and the repository name).',
  },
  snapshot_not_allowed: {
    status: 403,
    meaning:
      "This node's daemon does not let pods (containerd tasks) fork that snapshot: it is not in `forkd daemon --pod-snapshots`.",
  },
  registry_unreachable: {
    status: 502,
    meaning:
      'The registry could not be reached or answered with an error; retry, or check its address.',
  },
  blob_invalid: {
    status: 502,
    meaning:
      'A blob from the registry or archive does not match its digest or size (corrupt or truncated); nothing of it was kept.',
  },
  image_format_unsupported: {
    status: 422,
    meaning:
      'The image uses a media type, compression, platform or archive layout forkd does not handle.',
  },
  disk_full: {
    status: 507,
    meaning:
      'The disk holding FORKD_HOME ran out of space (or inodes); the operation was undone and nothing half-written was kept.',
  },
  pack_invalid: {
    status: 422,
    meaning:
      'The snapshot pack or pushed artifact is not one forkd can read: another format version, a missing parent, files that do not match the manifest.',
  },
  pack_incompatible: {
    status: 409,
    meaning:
      'This host cannot restore the snapshot pack: another QEMU version, accelerator or CPU than the one that captured it.',
  },
} as const;

/**
 * A stable error code from {@link ERROR_CATALOG}.
 *
 * @example
 * const code: ErrorCode = 'sandbox_not_found';
 */
export type ErrorCode = keyof typeof ERROR_CATALOG;

/**
 * The error every forkd layer throws: a catalog code, a message saying what to do next,
 * and optional structured details. The SDK throws the per-code subclasses
 * ({@link SandboxNotFoundError}, {@link CapacityError}, …), which all extend this one.
 *
 * @example
 * try { await sandbox.files.read('/nope'); }
 * catch (e) { if (e instanceof ForkdError && e.code === 'guest_file_not_found') ... }
 */
export class ForkdError extends Error {
  /**
   * The HTTP status the catalog maps this code to.
   *
   * @example
   * new ForkdError('capacity', 'busy').status; // 503
   */
  readonly status: number;

  /**
   * `code` is the catalog code, `details` optional structured context (echoed on the wire).
   *
   * @example
   * throw new ForkdError('bad_request', 'cpus must be from 1 to 64', { field: 'cpus' });
   */
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ForkdError';
    this.status = ERROR_CATALOG[code].status;
  }

  /**
   * The wire form: `{ error: { code, message, details } }`.
   *
   * @example
   * JSON.stringify(err); // {"error":{"code":"bad_request","message":"…"}}
   */
  toJSON(): { error: { code: ErrorCode; message: string; details?: Record<string, unknown> } } {
    return { error: { code: this.code, message: this.message, details: this.details } };
  }
}

/**
 * True when `e` is a {@link ForkdError} with the given code.
 *
 * @example
 * if (isForkdError(e, 'capacity')) await sleep(1000);
 */
export function isForkdError(e: unknown, code?: ErrorCode): e is ForkdError {
  return e instanceof ForkdError && (code === undefined || e.code === code);
}

// ---- one class per code ---------------------------------------------------------------

/** `guest_file_not_found` → `GuestFileNotFound`. */
type Pascal<S extends string> = S extends `${infer Head}_${infer Tail}`
  ? `${Capitalize<Head>}${Pascal<Tail>}`
  : Capitalize<S>;

/**
 * The class name of a code: `sandbox_not_found` → `SandboxNotFoundError`.
 *
 * @example
 * const name: ErrorClassName<'capacity'> = 'CapacityError';
 */
export type ErrorClassName<C extends ErrorCode> = `${Pascal<C>}Error`;

/**
 * Extra facts a response carries besides its body.
 *
 * @example
 * new CapacityError('busy', undefined, { retryAfterMs: 1000 });
 */
export interface ErrorOptions {
  cause?: unknown;
  /** From a 503's `Retry-After` header. */
  retryAfterMs?: number;
}

/**
 * An error whose `code` is known to be `C`: the instance type of that code's class.
 *
 * @example
 * function onMissing(e: ForkdErrorOf<'sandbox_not_found'>) { console.log(e.details); }
 */
export type ForkdErrorOf<C extends ErrorCode> = ForkdError & { readonly code: C };

/**
 * The constructor of one code's error class.
 *
 * @example
 * const Cls: ForkdErrorClass<'timeout'> = TimeoutError;
 * throw new Cls('the exec did not finish in 5 s');
 */
export interface ForkdErrorClass<C extends ErrorCode> {
  new (message: string, details?: Record<string, unknown>, options?: ErrorOptions): ForkdErrorOf<C>;
  /**
   * The catalog code every instance carries.
   *
   * @example
   * SandboxNotFoundError.code; // 'sandbox_not_found'
   */
  readonly code: C;
}

function className<C extends ErrorCode>(code: C): ErrorClassName<C> {
  const pascal = code
    .split('_')
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join('');
  return `${pascal}Error` as ErrorClassName<C>;
}

/** A subclass of ForkdError fixed to one code and named after it. */
function defineErrorClass<C extends ErrorCode>(code: C): ForkdErrorClass<C> {
  const name = className(code);
  const cls = class extends ForkdError {
    static readonly code = code;
    constructor(message: string, details?: Record<string, unknown>, options?: ErrorOptions) {
      super(code, message, details, options);
      this.name = name;
    }
  };
  Object.defineProperty(cls, 'name', { value: name });
  return cls as unknown as ForkdErrorClass<C>;
}

/**
 * The daemon is at its concurrency cap (HTTP 503). `retryAfterMs` is the daemon's
 * `Retry-After`, when it sent one: wait that long before trying again.
 *
 * @example
 * try { await Sandbox.create(); }
 * catch (e) { if (e instanceof CapacityError) await sleep(e.retryAfterMs ?? 1000); }
 */
export class CapacityError extends defineErrorClass('capacity') {
  /**
   * How long the daemon asked us to wait, in ms.
   *
   * @example
   * await new Promise((r) => setTimeout(r, err.retryAfterMs ?? 1000));
   */
  readonly retryAfterMs?: number;

  constructor(message: string, details?: Record<string, unknown>, options?: ErrorOptions) {
    super(message, details, options);
    this.retryAfterMs = options?.retryAfterMs;
  }
}

type ClassesByCode = { readonly [C in ErrorCode]: ForkdErrorClass<C> } & {
  readonly capacity: typeof CapacityError;
};

/**
 * The error class of every catalog code.
 *
 * @example
 * const err = new ERROR_CLASSES.sandbox_not_found('no sandbox sbx-000000000000');
 * err instanceof SandboxNotFoundError; // true
 */
export const ERROR_CLASSES: ClassesByCode = Object.freeze({
  ...(Object.fromEntries(
    Object.keys(ERROR_CATALOG).map((code) => [code, defineErrorClass(code as ErrorCode)]),
  ) as { [C in ErrorCode]: ForkdErrorClass<C> }),
  capacity: CapacityError,
});

type ClassesByName = { readonly [C in ErrorCode as ErrorClassName<C>]: ClassesByCode[C] };

const byName = Object.fromEntries(
  Object.entries(ERROR_CLASSES).map(([code, cls]) => [className(code as ErrorCode), cls]),
) as unknown as ClassesByName;

/**
 * One class per catalog code, all extending {@link ForkdError}; test with `instanceof`.
 *
 * @example
 * try { await Sandbox.connect('sbx-000000000000'); }
 * catch (e) { if (e instanceof SandboxNotFoundError) console.log('gone'); }
 */
export const {
  BadRequestError,
  UnauthorizedError,
  NotFoundError,
  ImageNotFoundError,
  SandboxNotFoundError,
  SandboxNotRunningError,
  SandboxBrokenError,
  ExecNotFoundError,
  ContextNotFoundError,
  PtySessionNotFoundError,
  SnapshotNotFoundError,
  SnapshotNotBootableError,
  SnapshotBrokenError,
  SnapshotFailedError,
  SnapshotWritingError,
  SnapshotInUseError,
  ImageInUseError,
  GuestFileNotFoundError,
  GuestPermissionDeniedError,
  NameTakenError,
  PayloadTooLargeError,
  UnsupportedMediaTypeError,
  CommandNotFoundError,
  CwdNotFoundError,
  UserNotFoundError,
  UnsupportedError,
  SetupRequiredError,
  DaemonUnreachableError,
  BootFailedError,
  AgentUnreachableError,
  GuestErrorError,
  TimeoutError,
  BuildFailedError,
  InternalError,
  PortUnreachableError,
  ReferenceNotFoundError,
  RegistryUnauthorizedError,
  SnapshotNotAllowedError,
  RegistryUnreachableError,
  BlobInvalidError,
  ImageFormatUnsupportedError,
  DiskFullError,
  PackInvalidError,
  PackIncompatibleError,
} = byName;

/**
 * The typed error for a code: an instance of that code's class.
 *
 * @example
 * throw createError('bad_request', 'memory_mib must be at least 64', { field: 'memory_mib' });
 */
export function createError<C extends ErrorCode>(
  code: C,
  message: string,
  details?: Record<string, unknown>,
  options?: ErrorOptions,
): ForkdErrorOf<C> {
  const cls = ERROR_CLASSES[code] as ForkdErrorClass<C>;
  return new cls(message, details, options);
}

/** A code the daemon does not know (a newer daemon, a proxy) gets the nearest generic one. */
function codeForStatus(status: number): ErrorCode {
  if (status === 400) return 'bad_request';
  if (status === 413) return 'payload_too_large';
  if (status === 415) return 'unsupported_media_type';
  if (status === 401 || status === 403) return 'unauthorized';
  if (status === 404) return 'not_found';
  if (status === 503) return 'capacity';
  if (status === 504) return 'timeout';
  return 'internal';
}

/**
 * The typed error for an error response: its `{error: {code, message, details}}` body, or,
 * for a body that is not one (a proxy's page), a generic code chosen by HTTP status.
 *
 * @example
 * const err = errorFromResponse(404, { error: { code: 'sandbox_not_found', message: 'no such sandbox' } });
 */
export function errorFromResponse(
  status: number,
  body: unknown,
  options?: ErrorOptions,
): ForkdError {
  const error = (body as { error?: { code?: unknown; message?: unknown; details?: unknown } })
    ?.error;
  const wireCode = typeof error?.code === 'string' ? error.code : undefined;
  const known = wireCode !== undefined && Object.hasOwn(ERROR_CATALOG, wireCode);
  const code = known ? (wireCode as ErrorCode) : codeForStatus(status);
  const message =
    typeof error?.message === 'string' ? error.message : `the forkd daemon answered HTTP ${status}`;
  let details =
    error?.details && typeof error.details === 'object'
      ? (error.details as Record<string, unknown>)
      : undefined;
  // A code this SDK does not know is kept, so nothing the daemon said is lost.
  if (wireCode !== undefined && !known) details = { ...details, code: wireCode, status };
  return createError(code, message, details, options);
}
