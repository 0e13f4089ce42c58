/**
 * `forkd doctor`: every host prerequisite as PASS / WARN / FAIL with the fix under each
 * problem. Exits 1 when anything FAILs, so scripts can gate on it.
 */
import type { Command } from 'commander';
import { paths } from '../config.js';
import { runDoctor, type CheckResult } from '../services/local.js';
import { action, printJson } from './output.js';

export function register(cmd: Command): void {
  cmd.option('--json', 'machine-readable output').action(
    action(async (opts: { json?: boolean }) => {
      const checks = await runDoctor(paths());
      const ok = checks.every((c) => c.status !== 'fail');
      if (opts.json) printJson({ ok, checks });
      else process.stdout.write(report(checks));
      return ok ? 0 : 1;
    }),
  );
}

function report(checks: CheckResult[]): string {
  const width = Math.max(...checks.map((c) => c.id.length));
  const lines = checks.flatMap((c) => {
    const line = `${c.status.toUpperCase().padEnd(4)}  ${c.id.padEnd(width)}  ${c.summary}`;
    return c.fix ? [line, `${' '.repeat(width + 8)}fix: ${c.fix}`] : [line];
  });
  const count = (s: CheckResult['status']) => checks.filter((c) => c.status === s).length;
  lines.push('', `${count('pass')} pass, ${count('warn')} warn, ${count('fail')} fail`);
  return lines.join('\n') + '\n';
}
