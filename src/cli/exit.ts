/**
 * forkd's exit codes: one table for every verb (documented in docs/cli.md, "Exit codes").
 * A catalog error exits with the code of its class; `exec` and `run` pass the command's own
 * code through, so the codes forkd uses for itself sit where commands rarely do (2 and the
 * shell's 124–130 conventions) or are documented as ambiguous for those two verbs.
 */
import type { ErrorCode } from '@forkd/sdk';

/** Every exit code forkd uses, by what it means. */
export const EXIT = {
  ok: 0,
  /** Any error without a code of its own below; a fork child failed; verify found problems. */
  failure: 1,
  /** A flag or argument is wrong (checked before anything is sent where forkd can). */
  usage: 2,
  /** The sandbox, snapshot, image, exec or path named does not exist. */
  notFound: 3,
  /** It exists, but its state refuses that now: not running, in use, taken, not allowed. */
  refused: 4,
  /** No daemon answered at the address (FORKD_URL, --url, or the local socket). */
  unreachable: 5,
  /** The daemon is at a concurrency cap: retry shortly. */
  busy: 6,
  /** The command (or forkd's own wait) ran out of time, as timeout(1) exits. */
  timeout: 124,
  /** exec/run: the command could not be started (no such cwd or user, not executable). */
  cannotStart: 126,
  /** exec/run: no such command in the image, as a shell exits. */
  commandNotFound: 127,
  /** Ctrl-C (128 + SIGINT). */
  interrupted: 130,
  /** stdout was closed before forkd was done writing (128 + SIGPIPE, as `yes | head` ends). */
  brokenPipe: 141,
} as const;

/** The exit code of each catalog code; a code added to the catalog must be placed here. */
const BY_CODE: Record<ErrorCode, number> = {
  bad_request: EXIT.usage,
  build_failed: EXIT.failure,
  payload_too_large: EXIT.usage,
  unsupported_media_type: EXIT.usage,
  not_found: EXIT.notFound,
  image_not_found: EXIT.notFound,
  sandbox_not_found: EXIT.notFound,
  exec_not_found: EXIT.notFound,
  context_not_found: EXIT.notFound,
  pty_session_not_found: EXIT.notFound,
  snapshot_not_found: EXIT.notFound,
  guest_file_not_found: EXIT.notFound,
  sandbox_not_running: EXIT.refused,
  snapshot_not_bootable: EXIT.refused,
  snapshot_in_use: EXIT.refused,
  image_in_use: EXIT.refused,
  unsupported: EXIT.refused,
  sandbox_broken: EXIT.refused,
  snapshot_broken: EXIT.refused,
  snapshot_failed: EXIT.refused,
  snapshot_writing: EXIT.refused,
  name_taken: EXIT.refused,
  unauthorized: EXIT.refused,
  guest_permission_denied: EXIT.refused,
  daemon_unreachable: EXIT.unreachable,
  capacity: EXIT.busy,
  timeout: EXIT.timeout,
  cwd_not_found: EXIT.cannotStart,
  user_not_found: EXIT.cannotStart,
  command_not_found: EXIT.commandNotFound,
  setup_required: EXIT.failure,
  boot_failed: EXIT.failure,
  agent_unreachable: EXIT.failure,
  guest_error: EXIT.failure,
  internal: EXIT.failure,
  port_unreachable: EXIT.failure,
  reference_not_found: EXIT.notFound,
  registry_unauthorized: EXIT.refused,
  snapshot_not_allowed: EXIT.refused,
  registry_unreachable: EXIT.failure,
  blob_invalid: EXIT.failure,
  image_format_unsupported: EXIT.failure,
  disk_full: EXIT.failure,
  pack_invalid: EXIT.failure,
  pack_incompatible: EXIT.refused,
};

/**
 * The exit code of a catalog error.
 *
 * @example
 * exitFor('sandbox_not_found'); // 3
 */
export function exitFor(code: ErrorCode): number {
  return BY_CODE[code] ?? EXIT.failure;
}

/** The exit code of several failures at once (`kill A B`): theirs when they agree, else 1. */
export function exitForAll(codes: ErrorCode[]): number {
  const exits = new Set(codes.map(exitFor));
  return exits.size === 1 ? [...exits][0]! : EXIT.failure;
}

const SIGNAL_NUMBERS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGABRT: 6,
  SIGKILL: 9,
  SIGSEGV: 11,
  SIGPIPE: 13,
  SIGTERM: 15,
};

/** How a command ended, as the in-process agent and the SDK both report it. */
export interface CommandEnd {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
}

/**
 * The exit code forkd exits with for a command's end: its own code, 124 after a timeout
 * (as timeout(1) does), 128 + N when signal N ended it (as a shell does).
 */
export function commandExit(end: CommandEnd, timeoutS: number | undefined): number {
  if (end.timedOut) {
    process.stderr.write(`forkd: command timed out after ${timeoutS} s\n`);
    return EXIT.timeout;
  }
  if (end.exitCode !== null) return end.exitCode;
  return 128 + (SIGNAL_NUMBERS[end.signal ?? ''] ?? 0);
}

/**
 * A reader that closes our stdout early (`forkd images | head -0`) ends forkd at once with
 * 141 (128 + SIGPIPE) and no message, as SIGPIPE ends a C program, instead of an EPIPE
 * stack trace. A stream's unheard 'error' becomes an uncaught exception, so listening there
 * covers stdout and stderr without creating either stream before it is used (that alone
 * cost a short call a few ms). Anything else uncaught is a bug: its stack, and exit 1.
 */
export function quietOnBrokenPipe(): void {
  process.on('uncaughtException', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(EXIT.brokenPipe);
    process.stderr.write(`${e.stack ?? String(e)}\n`);
    process.exit(EXIT.failure);
  });
}
