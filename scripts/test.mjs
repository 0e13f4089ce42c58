#!/usr/bin/env node
// Runs the whole suite, tier by tier, and prints one summary with the combined status:
//   unit    (dist/test/unit) no VMs, no daemon, no host tools: files run concurrently;
//   api     (dist/test/api)  the REST app, CLI and SDK over fake services, daemon and agent;
//   e2e     (dist/test/e2e)  real QEMU under TCG, the real agent, daemon and host tools;
//   python  the Python SDK: its type check (mypy --strict, configured in
//           packages/python/pyproject.toml) and its unittest modules (packages/python/tests),
//           against a real daemon and VMs.
// The tiers that boot VMs run two files (e2e) or two unittest modules (python) at a time: a
// file mostly waits on one single-threaded TCG guest, so the second core is idle when they
// run one by one; each file has its own FORKD_HOME, daemon and network namespaces.
// FORKD_TEST_TIER=unit|api|e2e|python runs one tier; FORKD_TEST_FILTER=substring limits the
// files of any tier (`test_async` one Python module); FORKD_TEST_CONCURRENCY overrides the
// concurrency of the VM tiers (1: one at a time).
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';

const PYTHON_DIR = 'packages/python';
const PYTHON_TESTS = join(PYTHON_DIR, 'tests');
const VM_CONCURRENCY = Math.max(1, Number(process.env.FORKD_TEST_CONCURRENCY ?? 2) || 1);
const NODE_TIERS = [
  { name: 'unit', concurrency: 4 },
  { name: 'api', concurrency: 2 },
  { name: 'e2e', concurrency: VM_CONCURRENCY, perFile: true },
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
  console.log(`\n==> ${tier.name}: ${files.length} files, ${tier.concurrency} at a time`);
  const args = ['--test', `--test-concurrency=${tier.concurrency}`, '--test-reporter=spec'];
  return run(process.execPath, [...args, ...files]);
}

/**
 * Runs a command with its stdout and stderr kept, so jobs running side by side print whole;
 * resolves with its exit status (127 when it cannot start), output and seconds taken.
 */
function runKept(cmd, args, cwd) {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    const chunks = [];
    child.stdout.on('data', (c) => chunks.push(c));
    child.stderr.on('data', (c) => chunks.push(c));
    const done = (status, extra = '') =>
      resolve({
        status,
        output: Buffer.concat(chunks).toString('utf8') + extra,
        seconds: (Date.now() - started) / 1000,
      });
    child.on('error', (e) => done(127, `${cmd}: ${e.message}\n`));
    child.on('close', (code) => done(code ?? 1));
  });
}

/**
 * The e2e files that took longest in a full run (over 70 s of tests each, the CI log of
 * 2026-12-04; the tier lists its slowest at the end) start first, so the tier does not end
 * with one long file on one core while the other idles. A file not named here keeps its
 * place.
 */
const E2E_LONG = [
  'snapshots/recovery',
  'packs/nodes',
  'docs/docs',
  'limits/branch-memory',
  'faults/kill',
  'cli/daemon-verbs',
  'build/build',
  'snapshots/branch',
  'load/load',
  'eval/contexts',
  'packs/packs',
  'network/network',
  'snapshots/chain',
  'images/debian',
].map((f) => join('e2e', `${f}.test.js`));

function longFirst(files) {
  const rank = (f) => {
    const i = E2E_LONG.findIndex((l) => f.endsWith(l));
    return i < 0 ? E2E_LONG.length : i;
  };
  return [...files].sort((a, b) => rank(a) - rank(b));
}

/** Modules that start a daemon (and boot VMs) first: the long ones should not come last. */
function slowFirst(files) {
  const boots = (f) => readFileSync(f, 'utf8').includes('start_module_daemon');
  return [...files.filter(boots), ...files.filter((f) => !boots(f))];
}

/**
 * Jobs `concurrency` at a time, in order; each job's output is printed whole when it ends,
 * under its name and time. Resolves with each job's result by name.
 */
async function runJobs(jobs, concurrency) {
  const results = new Map();
  const queue = [...jobs];
  const lane = async () => {
    for (let job = queue.shift(); job; job = queue.shift()) {
      const r = await runKept(job.cmd, job.args, job.cwd);
      process.stdout.write(`\n--- ${job.name} (${r.seconds.toFixed(1)} s)\n${r.output}`);
      results.set(job.name, r);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  return results;
}

/**
 * mypy and each unittest module as its own job, VM_CONCURRENCY at a time. Returns mypy's
 * result and the modules' combined one.
 */
async function runPython(files) {
  const jobs = [
    { name: 'mypy', cmd: 'mypy', args: [], cwd: PYTHON_DIR },
    ...slowFirst(files).map((f) => ({
      name: basename(f, '.py'),
      cmd: 'python3',
      args: ['-m', 'unittest', '-v', basename(f, '.py')],
      cwd: PYTHON_TESTS,
    })),
  ];
  const results = await runJobs(jobs, VM_CONCURRENCY);
  if (results.get('mypy').status === 127)
    console.error('mypy is missing: apt-get install mypy (scripts/setup.sh does)');
  const modules = jobs.slice(1).map((j) => results.get(j.name));
  const counts = modules.map((r) => unittestCounts(r.output));
  return {
    mypy: results.get('mypy').status,
    status: modules.find((r) => r.status !== 0)?.status ?? 0,
    counts: describeCounts(counts),
  };
}

function describeCounts(counts) {
  const sum = (k) => counts.reduce((a, c) => a + c[k], 0);
  const skipped = sum('skipped');
  return `${sum('passed')} passed, ${sum('failed')} failed${skipped ? `, ${skipped} skipped` : ''}`;
}

/**
 * The VM tier: each file its own `node --test` (Node 20 sorts the files of one run and
 * reports no file per test), so the longest start first and each prints under its name and
 * time; the slowest are listed at the end (the suite's time budget is spent there).
 */
async function runFilesTier(tier, files) {
  console.log(`\n==> ${tier.name}: ${files.length} files, ${tier.concurrency} at a time`);
  const jobs = longFirst(files).map((f) => ({
    name: f.replace(/^dist\/test\//, ''),
    cmd: process.execPath,
    args: ['--test', '--test-reporter=spec', f],
  }));
  const results = await runJobs(jobs, tier.concurrency);
  const all = jobs.map((j) => [j.name, results.get(j.name)]);
  const slowest = [...all].sort((a, b) => b[1].seconds - a[1].seconds).slice(0, 10);
  console.log(`\n--- ${tier.name}: the slowest files`);
  for (const [name, r] of slowest) console.log(`${r.seconds.toFixed(1).padStart(7)} s  ${name}`);
  return {
    status: all.find(([, r]) => r.status !== 0)?.[1].status ?? 0,
    counts: describeCounts(all.map(([, r]) => specCounts(r.output))),
  };
}

/** Passed, failed and skipped tests from the spec reporter's closing lines. */
function specCounts(text) {
  const count = (what) => Number(new RegExp(`^ℹ ${what} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  const failed = count('fail') + count('cancelled');
  // A file that failed before the reporter's summary (a crash) counts as one failure.
  const broken = !/^ℹ tests \d+/m.test(text) ? 1 : 0;
  return { passed: count('pass'), failed: failed + broken, skipped: count('skipped') };
}

/** Passed, failed and skipped tests from unittest's "Ran N tests" and its last line. */
function unittestCounts(text) {
  const ran = Number(/Ran (\d+) tests?/.exec(text)?.[1] ?? 0);
  const count = (what) => Number(new RegExp(`${what}=(\\d+)`).exec(text)?.[1] ?? 0);
  const failed = count('failures') + count('errors') + count('unexpected successes');
  const skipped = count('skipped') + count('expected failures');
  // A module that failed before its tests ran (an import error) counts as one failure.
  const broken = ran === 0 && !/^OK/m.test(text) ? 1 : 0;
  return { passed: ran - failed - skipped, failed: failed + broken, skipped };
}

const results = [];
for (const tier of NODE_TIERS.filter((t) => wanted(t.name))) {
  const files = matching(find(join('dist', 'test', tier.name), '.test.js'));
  if (files.length === 0) continue;
  if (!tier.perFile) {
    results.push([tier.name, runNodeTier(tier, files)]);
    continue;
  }
  const r = await runFilesTier(tier, files);
  results.push([tier.name, r.status, r.counts]);
}
if (pythonFiles.length) {
  console.log(`\n==> python: ${pythonFiles.length} files, ${VM_CONCURRENCY} at a time`);
  const python = await runPython(pythonFiles);
  results.push(['mypy', python.mypy]);
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
