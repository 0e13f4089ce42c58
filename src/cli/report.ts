/**
 * How every verb reports an error: one line `forkd: MESSAGE [code]` (the API's error body
 * with `--json`) and the exit code of its class (exit.ts). Errors about a value the user
 * typed are put in the user's words: the daemon's field names (`body.memory_mib`) become
 * the flag (`--memory`), and what is allowed is said plainly, never as a pattern.
 */
import { ForkdError } from '@forkd/sdk';
import { exitFor } from './exit.js';
import { formatMib } from './parse.js';

/** The flag (or argument) behind each field of the REST contract. */
const FIELD_FLAGS: Record<string, string> = {
  memory_mib: '--memory',
  cpus: '--cpus',
  timeout_s: '--timeout',
  timeout_ms: '--timeout',
  labels: '--label',
  label: '--label',
  env: '--env',
  image: '--image',
  tag: '--tag',
  snapshot: 'the snapshot tag',
  n: '-n',
  fork: '--fork',
  mode: '--mode',
  cwd: '--cwd',
  user: '--user',
  argv: 'the command',
  id: 'the sandbox id',
  path: 'the path',
  size: 'the size',
  warm: '--warm',
  start: '--start',
  wait_for: '--wait-for',
  wait_port: '--wait-port',
  wait_timeout_s: '--wait-timeout',
  to: '--to',
};

/** `body.labels.x` → `labels`: the contract field a validation error is about. */
function fieldName(field: string): string {
  const parts = field.split('.');
  const scoped = ['body', 'query', 'params', 'querystring'].includes(parts[0] ?? '');
  return (scoped ? parts[1] : parts[0]) ?? field;
}

/** What the daemon said is wrong with a field, without patterns or JSON pointers. */
function plainReason(reason: unknown): string {
  const text = typeof reason === 'string' ? reason : 'is not accepted';
  if (/pattern|format/.test(text)) return 'is not in the accepted form (see --help)';
  if (text === 'unknown field') return 'is not known to this daemon (is it older than forkd?)';
  return text;
}

/** A `bad_request` naming a contract field, said about the flag instead. */
function fieldMessage(e: ForkdError): string | undefined {
  const d = e.details ?? {};
  if (typeof d.field !== 'string') return undefined;
  const name = fieldName(d.field);
  const flag = FIELD_FLAGS[name] ?? name;
  if (name === 'memory_mib' && typeof d.max === 'number' && typeof d.min === 'number') {
    const max = d.limit === 'host' ? `the host's ${formatMib(d.max)}` : formatMib(d.max);
    return `${flag} must be between ${formatMib(d.min)} and ${max}`;
  }
  if (typeof d.reason === 'string') return `${flag} ${plainReason(d.reason)}`;
  return undefined;
}

/** The message a person reads for `e`. */
export function userMessage(e: ForkdError): string {
  const d = e.details ?? {};
  switch (e.code) {
    case 'bad_request':
      return fieldMessage(e) ?? e.message;
    case 'cwd_not_found':
      return `--cwd ${String(d.cwd ?? '')}: no such directory in the sandbox`;
    case 'user_not_found':
      return `--user ${String(d.user ?? '')}: no such user in the sandbox image's /etc/passwd (a numeric uid always runs)`;
    default:
      return e.message;
  }
}

/** Any thrown value as a catalog error (a bug of ours is `internal`). */
export function asForkdError(e: unknown): ForkdError {
  return e instanceof ForkdError
    ? e
    : new ForkdError('internal', e instanceof Error ? e.message : String(e));
}

/** Report an error the way every verb does and return the process exit code to use. */
export function reportError(e: unknown, json: boolean): number {
  const err = asForkdError(e);
  if (json) process.stderr.write(JSON.stringify(err.toJSON()) + '\n');
  else process.stderr.write(`forkd: ${userMessage(err)} [${err.code}]\n`);
  return exitFor(err.code);
}
