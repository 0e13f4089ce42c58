#!/usr/bin/env node
// Runs the whole suite, tier by tier, and prints one summary with the combined status:
//   unit    (dist/test/unit) no VMs, no daemon, no host tools: files run concurrently;
//   api     (dist/test/api)  the REST app, CLI and SDK over fake services, daemon and agent;
//   e2e     (dist/test/e2e)  real QEMU under TCG, the real agent, daemon and host tools: one
//                            file at a time on a 2-core host;
//   python  the Python SDK: its type check (mypy --strict, configured in
//           packages/python/pyproject.toml) and its unittest suite (packages/python/tests),
//           against a real daemon and VMs.
// FORKD_TEST_TIER=unit|api|e2e|python runs one tier; FORKD_TEST_FILTER=substring limits the
// files of any tier (`test_async` one Python module); FORKD_TEST_CONCURRENCY overrides the
// e2e concurrency.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';

const PYTHON_DIR = 'packages/python';
const PYTHON_TESTS = join(PYTHON_DIR, 'tests');
const NODE_TIERS = [
  { name: 'unit', concurrency: 4 },
  { name: 'api', concurrency: 2 },
  { name: 'e2e', concurrency: Number(process.env.FORKD_TEST_CONCURRENCY ?? 1) },
];
const TIER_NAMES = [...NODE_TIERS.map((t) => t.name), 'python'];

function find(dir, suffix) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return find(p, suffix);
    return p.endsWith(suffix) ? [p] : [];
  });
}

// Created snapshots get a pre-warmed pool by default (docs/snapshots.md): in tests its VMs
// would restore in the background of every file on 2 cores, so the suite turns it off
// (the tests that need a pool ask for one).
process.env.FORKD_DEFAULT_POOL ??= '0';

const filter = process.env.FORKD_TEST_FILTER ?? '';
const only = process.env.FORKD_TEST_TIER;
if (only && !TIER_NAMES.includes(only)) {
  console.error(`FORKD_TEST_TIER must be one of ${TIER_NAMES.join(', ')}`);
  process.exit(2);
}
const wanted = (name) => !only || only === name;
const matching = (files) => files.filter((f) => f.includes(filter)).sort();
const pythonFiles = wanted('python')
  ? matching(find(PYTHON_TESTS, '.py').filter((f) => basename(f).startsWith('test_')))
  : [];

/** The exit status of a command run with inherited stdio (127 when it cannot start). */
function run(cmd, args, options = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', ...options });
  if (r.error) console.error(`${cmd}: ${r.error.message}`);
  return r.error ? 127 : (r.status ?? 1);
}

function runNodeTier(tier, files) {
  console.log(`\n==> ${tier.name}: ${files.length} files`);
  const args = ['--test', `--test-concurrency=${tier.concurrency}`, '--test-reporter=spec'];
  return run(process.execPath, [...args, ...files]);
}

function runMypy() {
  const status = run('mypy', [], { cwd: PYTHON_DIR });
  if (status === 127)
    console.error('mypy is missing: apt-get install mypy (scripts/setup.sh does)');
  return status;
}

/** The unittest suite, its output passed through and its closing lines counted. */
function runPython() {
  const args = filter
    ? ['-m', 'unittest', '-v', ...pythonFiles.map((f) => basename(f, '.py'))]
    : ['-m', 'unittest', 'discover', '-s', PYTHON_TESTS, '-v'];
  const cwd = filter ? PYTHON_TESTS : '.';
  return new Promise((resolve) => {
    const child = spawn('python3', args, { cwd, stdio: ['ignore', 'inherit', 'pipe'] });
    let tail = '';
    child.stderr.on('data', (chunk) => {
      process.stderr.write(chunk);
      tail = (tail + chunk.toString('utf8')).slice(-4096);
    });
    child.on('error', (e) => resolve({ status: 127, counts: `python3: ${e.message}` }));
    child.on('close', (code) => resolve({ status: code ?? 1, counts: unittestCounts(tail) }));
  });
}

/** "N passed, N failed[, N skipped]" from unittest's "Ran N tests" and its last line. */
function unittestCounts(text) {
  const ran = Number(/Ran (\d+) tests?/.exec(text)?.[1] ?? 0);
  const count = (what) => Number(new RegExp(`${what}=(\\d+)`).exec(text)?.[1] ?? 0);
  const failed = count('failures') + count('errors') + count('unexpected successes');
  const skipped = count('skipped') + count('expected failures');
  const passed = ran - failed - skipped;
  return `${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`;
}

const results = [];
for (const tier of NODE_TIERS.filter((t) => wanted(t.name))) {
  const files = matching(find(join('dist', 'test', tier.name), '.test.js'));
  if (files.length) results.push([tier.name, runNodeTier(tier, files)]);
}
if (pythonFiles.length) {
  console.log(`\n==> python: ${pythonFiles.length} files`);
  results.push(['mypy', runMypy()]);
  const python = await runPython();
  results.push(['python', python.status, python.counts]);
}
if (results.length === 0) {
  console.error(
    `no test files match ${JSON.stringify(filter)} under dist/test/{unit,api,e2e} or ${PYTHON_TESTS}`,
  );
  process.exit(1);
}

console.log('\n== summary');
for (const [name, status, counts] of results) {
  console.log(`${name}: ${status === 0 ? 'ok' : `FAILED (exit ${status})`}`);
  if (counts) console.log(`${name}: ${counts}`);
}
process.exit(results.some(([, status]) => status !== 0) ? 1 : 0);
