/**
 * Parsing and checking of the values users type, shared by every verb: sizes like 256M or
 * 1.5G, counts, timeouts, K=V pairs, ids, names. Each check uses the contract's rules
 * (rules.ts) and fails as bad usage naming the flag as typed and what it accepts, so no
 * JSON pointer or pattern from the daemon ever reaches the user for these.
 */
import { ForkdError } from '@forkd/sdk';
import {
  DESCRIBED,
  ENV_NAME,
  LABEL_KEY,
  LIMITS,
  NAME,
  readSize,
  SANDBOX_ID,
  USER,
} from './rules.js';

const MIB = 1024 * 1024;

type Range = { readonly min: number; readonly max: number };

/**
 * The spelling of a flag the user typed, of its names (`-e` or `--env`): messages name the
 * flag as it stands on their command line. The last name when none was typed.
 */
export function typed(...names: string[]): string {
  const args = process.argv.slice(2);
  const found = names.find((n) => args.some((a) => a === n || a.startsWith(`${n}=`)));
  return found ?? names[names.length - 1] ?? '';
}

/** Bad usage: exit 2 with this message (rules of the flag included). */
export function usage(message: string, details?: Record<string, unknown>): ForkdError {
  return new ForkdError('bad_request', message, details);
}

/** MiB as a person writes it: 64M, 1G, 23.4G. */
export function formatMib(mib: number): string {
  if (mib < 1024) return `${mib}M`;
  const g = mib / 1024;
  return Number.isInteger(g) ? `${g}G` : `${Math.floor(g * 10) / 10}G`;
}

/**
 * "256M", "1G", "1.5G", "512" (MiB), "1K" → MiB, rounded down (so under 1 MiB is 0, which
 * the caller's range then refuses by its minimum); `flag` names it in errors.
 */
export function parseSize(text: string, flag: string): number {
  const size = readSize(text, MIB);
  if (!size) throw usage(`${flag} "${text}" is not a size like 256M or 1G`, { flag });
  if ('unknownUnit' in size) {
    throw usage(
      `${flag} "${text}": unknown unit "${size.unknownUnit}"; use K, M, G or T (powers of 1024), e.g. 256M`,
      { flag },
    );
  }
  return Math.floor(size.bytes / MIB);
}

/** A guest's memory: a size within the contract's range (the host's RAM is the daemon's). */
export function parseMemory(text: string, flag = '--memory'): number {
  const mib = parseSize(text, flag);
  const { min, max } = LIMITS.memoryMib;
  if (mib < min || mib > max) {
    const why = mib < min ? 'too small' : 'too large';
    throw usage(
      `${flag} ${text} is ${why}: it must be between ${formatMib(min)} and ${formatMib(max)}`,
      { flag, min: formatMib(min), max: formatMib(max) },
    );
  }
  return mib;
}

/** A whole number within `range`. */
export function parseCount(text: string, flag: string, range: Range): number {
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < range.min || n > range.max) {
    throw usage(`${flag} must be a whole number from ${range.min} to ${range.max}, not "${text}"`, {
      flag,
    });
  }
  return n;
}

/** Virtual CPUs. */
export function parseCpus(text: string, flag = '--cpus'): number {
  return parseCount(text, flag, LIMITS.cpus);
}

/** Seconds (fractions allowed) above 0 and at most `maxS`. */
export function parseSeconds(text: string, flag: string, maxS: number): number {
  const s = Number(text);
  if (!(s > 0) || s > maxS) {
    throw usage(`${flag} must be a number of seconds above 0 and at most ${maxS}, not "${text}"`, {
      flag,
    });
  }
  return s;
}

/** An optional `--timeout S` of a sandbox (whole seconds on the wire, so rounded up). */
export function parseSandboxTimeout(text: string | undefined, flag = '--timeout') {
  return text === undefined ? undefined : parseSeconds(text, flag, LIMITS.sandboxTimeoutS.max);
}

/** An optional `--timeout S` of a command. */
export function parseCommandTimeout(text: string | undefined, flag = '--timeout') {
  return text === undefined ? undefined : parseSeconds(text, flag, LIMITS.execTimeoutMs.max / 1000);
}

/** ["K=V", …] → {K: V}, every key checked against `key`, at most `max` of them. */
function pairs(
  list: string[],
  flag: string,
  rule: { key: RegExp; described: string; max: number; valueLength: number },
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of list) {
    const eq = pair.indexOf('=');
    const key = pair.slice(0, Math.max(eq, 0));
    if (eq <= 0 || !rule.key.test(key)) {
      throw usage(`${flag} "${pair}" is not ${rule.described}`, { flag });
    }
    if (pair.length - eq - 1 > rule.valueLength) {
      throw usage(`${flag} ${key}: the value is longer than ${rule.valueLength} characters`, {
        flag,
      });
    }
    out[key] = pair.slice(eq + 1);
  }
  if (Object.keys(out).length > rule.max) {
    throw usage(`at most ${rule.max} ${flag} values`, { flag });
  }
  return out;
}

/** `-e K=V` values. */
export function parseEnv(list: string[], flag = typed('-e', '--env')): Record<string, string> {
  return pairs(list, flag, { key: ENV_NAME, described: DESCRIBED.envName, ...LIMITS.env });
}

/** `--label K=V` values. */
export function parseLabels(list: string[], flag = '--label'): Record<string, string> {
  return pairs(list, flag, { key: LABEL_KEY, described: DESCRIBED.labelKey, ...LIMITS.labels });
}

/** One `--label K=V` filter (ps, kill). */
export function parseLabelFilter(text: string | undefined, flag = '--label') {
  if (text !== undefined) parseLabels([text], flag);
  return text;
}

/** A sandbox id as `forkd ps` prints it. */
export function parseSandboxId(text: string): string {
  if (!SANDBOX_ID.test(text)) {
    throw usage(`"${text}" is not a sandbox id: ids are ${DESCRIBED.sandboxId}`, { id: text });
  }
  return text;
}

/** An image name or snapshot tag; `what` is the flag or argument it came from. */
export function parseName(text: string, what: string): string {
  if (!NAME.test(text)) throw usage(`${what} "${text}" must be ${DESCRIBED.name}`, { flag: what });
  return text;
}

/** The same, for an optional flag. */
export function optionalName(text: string | undefined, what: string): string | undefined {
  return text === undefined ? undefined : parseName(text, what);
}

/** `--cwd` is a guest path: relative to what would it be? */
export function parseCwd(cwd: string | undefined): string | undefined {
  if (cwd !== undefined && !cwd.startsWith('/')) {
    throw usage(`--cwd "${cwd}" must be an absolute path in the sandbox`, { flag: '--cwd' });
  }
  return cwd;
}

/** `--user NAME|UID`. */
export function parseUser(text: string | undefined, flag = '--user'): string | undefined {
  if (text !== undefined && !USER.test(text)) {
    throw usage(`${flag} "${text}" must be ${DESCRIBED.user}`, { flag });
  }
  return text;
}

/** Repeatable option values (`-e A=1 -e B=2`), for commander. */
export function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}
