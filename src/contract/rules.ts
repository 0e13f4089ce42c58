/**
 * The rules of the contract, written once: name and id patterns, resource limits, fork and
 * pool maxima, signal names. The TypeBox schemas (schemas.ts) are built from them, and the
 * services and drivers check the same values for callers that do not come through HTTP
 * (`forkd run`, the CLI's local verbs, in-process tests); nothing restates them.
 * This module imports nothing but the SDK's signal list (one list for the SDK, the daemon and
 * the shim): every layer may depend on it.
 */

/** A range of integers, both ends included. */
export interface IntRange {
  min: number;
  max: number;
}

/** Image names and snapshot tags: no `/`, `..`, NUL or whitespace; 1–63 characters. */
export const NAME_PATTERN = '^[a-z0-9][a-z0-9._-]{0,62}$';
export const NAME_RULE = new RegExp(NAME_PATTERN);
/** How the name rule reads in an error message. */
export const NAME_RULE_TEXT =
  '1 to 63 characters of a-z, 0-9, ".", "_" and "-", starting with a letter or digit';

/** `sbx-` and 12 hex digits. */
export const SANDBOX_ID_PATTERN = '^sbx-[0-9a-f]{12}$';
/** `ex-` and 12 hex digits (a streaming exec). */
export const EXEC_ID_PATTERN = '^ex-[0-9a-f]{12}$';
export const LABEL_KEY_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$';
export const ENV_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,127}$';
/** A user name or a numeric uid for `exec --user`. */
export const USER_PATTERN = '^[a-z_][a-z0-9_-]{0,31}$|^[0-9]{1,10}$';

/** A sandbox's resources, and what it gets when the request names none. */
export const LIMITS = {
  memoryMiB: { min: 64, max: 65536 },
  cpus: { min: 1, max: 64 },
  /** A sandbox's timeout, from 1 s to a week. */
  timeoutS: { min: 1, max: 7 * 24 * 3600 },
  /** An idle policy's times (0: never), up to a week like a timeout. */
  idleAfterS: { min: 0, max: 7 * 24 * 3600 },
  /** One command's timeout, up to a day. */
  execTimeoutMs: { min: 1, max: 24 * 3600 * 1000 },
  /** An image's filesystem size when built from a directory. */
  imageSizeMiB: { min: 16, max: 1048576 },
  /** How long `snapshot create` waits for its readiness check. */
  waitTimeoutS: { min: 1, max: 3600 },
  /** The guest port `snapshot create` waits for. */
  waitPort: { min: 1, max: 65535 },
  /** A terminal's columns and rows (the guest agent's own bounds). */
  ptySize: { min: 1, max: 1000 },
} as const satisfies Record<string, IntRange>;

/** Labels and environment variables of a request: how many, and how long a value. */
export const LABELS_MAX = { count: 64, valueLength: 256 } as const;
export const ENV_MAX = { count: 256, valueLength: 32768 } as const;

export const DEFAULTS = { memoryMiB: 256, cpus: 1 } as const;

/** Children of one fork request (and of `branch --fork`, where 0 means none). */
export const FORK_MAX = 100;
/** Pre-started VMMs kept per snapshot. */
export const POOL_MAX = 64;

/** Signals a command may be sent: the SDK's list. */
export { SIGNALS, type SignalName } from '@forkd/sdk/signals';

/** What a terminal session runs when asked for none: a login shell, bash where there is one. */
export const PTY_LOGIN_SHELL = 'exec "$(command -v bash || command -v sh)" -l';

/** True when `value` is an integer in `range`. */
export function inRange(value: number, range: IntRange): boolean {
  return Number.isInteger(value) && value >= range.min && value <= range.max;
}

/**
 * A sandbox's resource limits (docs/limits.md): caps on its QEMU process on the host.
 * `pids` bounds QEMU's threads (and a live branch's fork of it), not the guest's processes;
 * `cpu` is a quota in cores, from 10 ms per 100 ms period up; `memory` is at least the guest's
 * RAM and is written as a number and a unit (`MEMORY_UNITS`, powers of 1024).
 */
export const LIMIT_RANGES = {
  pids: { min: 32, max: 4194304 },
  cpu: { min: 0.01, max: 1024 },
} as const;
export const MEMORY_UNITS: Readonly<Record<string, number>> = {
  '': 1,
  b: 1,
  k: 1024,
  kb: 1024,
  ki: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1024 ** 2,
  mi: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1024 ** 3,
  gi: 1024 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tb: 1024 ** 4,
  ti: 1024 ** 4,
  tib: 1024 ** 4,
};

/**
 * A size as people write it: a number and one of `MEMORY_UNITS` (any case). A bare number
 * counts `bare` bytes each (bytes in the API, MiB in the CLI's `--memory`). Undefined when
 * the text is no number and unit; `unknownUnit` when the unit is none of those.
 */
export function readSize(
  text: string,
  bare = 1,
): { bytes: number } | { unknownUnit: string } | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$/.exec(text);
  if (!m) return undefined;
  const unit = m[2] ?? '';
  const factor = unit === '' ? bare : MEMORY_UNITS[unit.toLowerCase()];
  if (factor === undefined) return { unknownUnit: unit };
  return { bytes: Math.floor(Number(m[1]) * factor) };
}
