/**
 * How every CLI verb writes: human text or `--json`, aligned tables, byte sizes, and the
 * action wrapper that turns any thrown error into a reported error and an exit code
 * (report.ts).
 */
import { reportError } from './report.js';

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

/** Binary units, one decimal below 10 (images are sized in MiB, so KiB rarely shows). */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n < 10 && i > 0 ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}

/** Resolves once everything written to stdout has been handed to the OS. */
export function drained(): Promise<void> {
  return new Promise((resolve) => {
    if (process.stdout.writableNeedDrain) process.stdout.once('drain', () => resolve());
    else resolve();
  });
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

/**
 * What a running sandbox has unenforced (`--accept-unenforced`), for `ps` and `info`:
 * `all` when nothing is missing, `NOT network, limits` otherwise, `-` when not running.
 */
export function formatEnforced(unenforced: readonly string[] | undefined): string {
  if (unenforced === undefined) return '-';
  return unenforced.length === 0 ? 'all' : `NOT ${unenforced.join(', ')}`;
}
