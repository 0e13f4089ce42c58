/**
 * One word per concept (docs/architecture.md "Words"): where a word was replaced, the old
 * one is not used again in the daemon's code or in the docs. A sandbox moved below running
 * is *paused* (or hibernated, halted), never "parked"; what stays is the density bench's
 * flag names (`--park`, `--park-only`) and the names of result files made with them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = new URL('../../..', import.meta.url).pathname;

/** The files under `dir` whose names end in `ext`, recursively. */
function filesUnder(dir: string, ext: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith(ext))
    .map((f) => join(dir, f));
}

/** Words kept on purpose: flag and file names, and the table that says the word is gone. */
const KEPT = [/--park(-only)?\b/g, /density-climb-parked/g, /"park" is no longer used/g];
const PARK = /\bpark(s|ed|ing)?\b/i;

test('"park" is not a word of the daemon or its docs (the word is pause)', () => {
  const files = [...filesUnder('src', '.ts'), ...filesUnder('docs', '.md'), 'README.md'];
  const found: string[] = [];
  for (const file of files) {
    readFileSync(join(ROOT, file), 'utf8')
      .split('\n')
      .forEach((line, i) => {
        const rest = KEPT.reduce((l, kept) => l.replace(kept, ''), line);
        if (PARK.test(rest)) found.push(`${file}:${i + 1}: ${line.trim()}`);
      });
  }
  assert.deepEqual(found, []);
});
