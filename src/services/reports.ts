/**
 * The host's reports the web UI shows as pages: the doctor's checks (the same as
 * `forkd doctor`) and the benchmark outputs saved under bench/results beside the daemon
 * (a checkout has them; an installed package may have none, which is an empty list).
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { BenchResultT, DoctorReportT } from '../contract/schemas.js';
import type { Paths } from '../config.js';
import { runDoctor } from './doctor.js';

/** At most this many result files, newest first: a page, not an archive. */
const MAX_RESULTS = 100;
/** A result file is a few lines of numbers; a larger one is cut. */
const MAX_TEXT = 64 * 1024;

export async function doctorReport(paths: Paths): Promise<DoctorReportT> {
  const checks = await runDoctor(paths);
  return { ok: checks.every((c) => c.status !== 'fail'), checks };
}

/** Every `*.txt` under `dir`, newest first; none when the directory does not exist. */
export async function benchResults(dir: string): Promise<BenchResultT[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const results = await Promise.all(
    names
      .filter((n) => n.endsWith('.txt'))
      .map(async (name) => {
        const file = join(dir, name);
        const [info, text] = await Promise.all([stat(file), readFile(file, 'utf8')]);
        return { name, modified_at: info.mtime.toISOString(), text: text.slice(0, MAX_TEXT) };
      }),
  );
  results.sort(
    (a, b) => b.modified_at.localeCompare(a.modified_at) || a.name.localeCompare(b.name),
  );
  return results.slice(0, MAX_RESULTS);
}
