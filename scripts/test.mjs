#!/usr/bin/env node
// Runs the whole suite: node's test runner over the compiled tests (dist/test/**.test.js),
// then the Python SDK's type check (mypy --strict, configured in packages/python/pyproject.toml)
// and its unittest suite (packages/python/tests), and prints one summary with the combined
// exit status. Files run one at a time by default: most boot real VMs under TCG on a
// 2-core host. FORKD_TEST_FILTER=substring limits the run to matching files, of either kind
// (`python` selects only the Python suite, `test_async` one of its modules).
import { readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';

const PYTHON_DIR = 'packages/python';
const PYTHON_TESTS = join(PYTHON_DIR, 'tests');

function find(dir, suffix) {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return find(p, suffix);
    return p.endsWith(suffix) ? [p] : [];
  });
}

const filter = process.env.FORKD_TEST_FILTER ?? '';
const nodeFiles = find('dist/test', '.test.js')
  .filter((f) => f.includes(filter))
  .sort();
const pythonFiles = find(PYTHON_TESTS, '.py')
  .filter((f) => basename(f).startsWith('test_') && f.includes(filter))
  .sort();
if (nodeFiles.length === 0 && pythonFiles.length === 0) {
  console.error(`no test files match ${JSON.stringify(filter)} under dist/test or ${PYTHON_TESTS}`);
  process.exit(1);
}

/** The exit status of a command run with inherited stdio (127 when it cannot start). */
function run(cmd, args, options = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', ...options });
  if (r.error) console.error(`${cmd}: ${r.error.message}`);
  return r.error ? 127 : (r.status ?? 1);
}

function runNode() {
  const concurrency = process.env.FORKD_TEST_CONCURRENCY ?? '1';
  return run(process.execPath, [
    '--test',
    `--test-concurrency=${concurrency}`,
    '--test-reporter=spec',
    ...nodeFiles,
  ]);
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
if (nodeFiles.length) results.push(['node', runNode()]);
if (pythonFiles.length) {
  results.push(['mypy', runMypy()]);
  const python = await runPython();
  results.push(['python', python.status, python.counts]);
}

console.log('\n== summary');
for (const [name, status, counts] of results) {
  console.log(`${name}: ${status === 0 ? 'ok' : `FAILED (exit ${status})`}`);
  if (counts) console.log(`${name}: ${counts}`);
}
process.exit(results.some(([, status]) => status !== 0) ? 1 : 0);
