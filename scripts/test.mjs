#!/usr/bin/env node
// Runs the suite with node's test runner over the compiled tests, tier by tier:
//   unit  (dist/test/unit) no VMs, no daemon, no host tools: files run concurrently;
//   api   (dist/test/api)  the REST app, CLI and SDK over fake services, daemon and agent;
//   e2e   (dist/test/e2e)  real QEMU under TCG, the real agent, daemon and host tools: one
//                          file at a time on a 2-core host.
// FORKD_TEST_TIER=unit|api|e2e runs one tier; FORKD_TEST_FILTER=substring limits the files;
// FORKD_TEST_CONCURRENCY overrides the e2e concurrency. Exits non-zero if any tier failed.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

const TIERS = [
  { name: 'unit', concurrency: 4 },
  { name: 'api', concurrency: 2 },
  { name: 'e2e', concurrency: Number(process.env.FORKD_TEST_CONCURRENCY ?? 1) },
];

function find(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return find(p);
    return p.endsWith('.test.js') ? [p] : [];
  });
}

const filter = process.env.FORKD_TEST_FILTER ?? '';
const only = process.env.FORKD_TEST_TIER;
const tiers = TIERS.filter((t) => !only || t.name === only);
if (tiers.length === 0) {
  console.error(`FORKD_TEST_TIER must be one of ${TIERS.map((t) => t.name).join(', ')}`);
  process.exit(2);
}
let ran = 0;
const failed = [];
for (const tier of tiers) {
  const files = find(join('dist', 'test', tier.name))
    .filter((f) => f.includes(filter))
    .sort();
  if (files.length === 0) continue;
  ran += files.length;
  console.log(`\n==> ${tier.name}: ${files.length} files`);
  const r = spawnSync(
    process.execPath,
    ['--test', `--test-concurrency=${tier.concurrency}`, '--test-reporter=spec', ...files],
    { stdio: 'inherit' },
  );
  if (r.status !== 0) failed.push(tier.name);
}
if (ran === 0) {
  console.error(`no test files match ${JSON.stringify(filter)} under dist/test/{unit,api,e2e}`);
  process.exit(1);
}
console.log(failed.length ? `\nfailed tiers: ${failed.join(', ')}` : '\nall tiers passed');
process.exit(failed.length ? 1 : 0);
