#!/usr/bin/env node
// Runs the whole suite with node's test runner over the compiled tests (dist/test/**.test.js).
// Files run one at a time by default: most boot real VMs under TCG on a 2-core host.
// FORKD_TEST_FILTER=substring limits the run to matching files.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

function find(dir) {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return find(p);
    return p.endsWith('.test.js') ? [p] : [];
  });
}

const filter = process.env.FORKD_TEST_FILTER ?? '';
const files = find('dist/test')
  .filter((f) => f.includes(filter))
  .sort();
if (files.length === 0) {
  console.error(`no test files match ${JSON.stringify(filter)} under dist/test`);
  process.exit(1);
}
const concurrency = process.env.FORKD_TEST_CONCURRENCY ?? '1';
const r = spawnSync(
  process.execPath,
  ['--test', `--test-concurrency=${concurrency}`, '--test-reporter=spec', ...files],
  { stdio: 'inherit' },
);
process.exit(r.status ?? 1);
