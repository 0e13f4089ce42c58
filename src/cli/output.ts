/**
 * How every CLI verb reports: human text or `--json`, and catalog errors turned into a
 * one-line message plus an exit code (2 for bad usage, 1 for everything else).
 */
import { ForkdError } from '../errors.js';

/** Print a value as JSON (for `--json`) on stdout. */
export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

/** Print rows as an aligned table with a header. */
export function printTable(headers: string[], rows: string[][]): void {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ');
  process.stdout.write([line(headers), ...rows.map(line)].join('\n') + '\n');
}

/** Report an error the way every verb does and return the process exit code to use. */
export function reportError(e: unknown, json: boolean): number {
  const err =
    e instanceof ForkdError
      ? e
      : new ForkdError('internal', e instanceof Error ? e.message : String(e));
  if (json) process.stderr.write(JSON.stringify(err.toJSON()) + '\n');
  else process.stderr.write(`forkd: ${err.message} [${err.code}]\n`);
  return err.code === 'bad_request' ? 2 : 1;
}

/** Run a verb's action, turning any thrown error into a reported error and exit code. */
export function action<A extends unknown[]>(
  fn: (...args: A) => Promise<number | void>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    const opts = args.find((a) => a && typeof a === 'object' && 'json' in (a as object)) as
      { json?: boolean } | undefined;
    try {
      const code = await fn(...args);
      if (typeof code === 'number') process.exitCode = code;
    } catch (e) {
      process.exitCode = reportError(e, Boolean(opts?.json));
    }
  };
}
