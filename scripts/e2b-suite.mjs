#!/usr/bin/env node
/**
 * E2B's own JS SDK integration tests (e2b-dev/E2B packages/js-sdk/tests) against a forkd
 * daemon's E2B listener, counted per area (core, pause, fork, git, metadata, gzip, signed
 * URLs). E2B's files are not part of forkd: give the tests directory of a checkout as the
 * first argument; it is copied into a scratch directory (default /work/e2b-suite, or
 * --work DIR) next to vitest and the published `e2b` package, with `../src` (the SDK's
 * sources in E2B's tree) resolved to that package. Nothing is written into the repo.
 *
 *   node scripts/e2b-suite.mjs ~/E2B/packages/js-sdk/tests [--template base] [--work DIR]
 *                              [--area core,pause] [--e2b 2.51.0]
 *
 * It needs a running daemon with an E2B listener and a template as E2B's `base` is (a
 * `user` account with sudo, bash, python3, git), and E2B_API_KEY, E2B_API_URL,
 * E2B_SANDBOX_URL pointing at it (docs/e2b.md, "Running E2B's own tests").
 * Cases that need E2B's cloud (templates, volumes, secrets, getHost over wildcard DNS and
 * TLS, E2B's snapshots API, IAM, egress proxies) are not run; the mocked unit tests of
 * the SDK itself are not run either (they never reach a server). The few cases that run
 * but need what no host here has (NOT_COUNTED: wildcard DNS, the internet) are listed
 * apart with the reason, not counted.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/** Test files by area; a file's cases count in its area. */
const AREAS = {
  core: [
    'sandbox/create.test.ts',
    'sandbox/connect.test.ts',
    'sandbox/kill.test.ts',
    'sandbox/timeout.test.ts',
    'sandbox/metrics.test.ts',
    'sandbox/internetAccess.test.ts',
    'sandbox/commands/',
    'sandbox/files/exists.test.ts',
    'sandbox/files/info.test.ts',
    'sandbox/files/list.test.ts',
    'sandbox/files/makeDir.test.ts',
    'sandbox/files/read.test.ts',
    'sandbox/files/remove.test.ts',
    'sandbox/files/rename.test.ts',
    'sandbox/files/write.test.ts',
    'sandbox/files/watch.test.ts',
    'sandbox/pty/',
    'api/list.test.ts',
    'api/info.test.ts',
    'api/kill.test.ts',
  ],
  pause: ['sandbox/snapshot.test.ts'],
  fork: ['sandbox/fork.test.ts'],
  git: ['sandbox/git/'],
  metadata: ['sandbox/files/metadata.test.ts'],
  gzip: ['sandbox/files/contentEncoding.test.ts'],
  'signed URLs': ['sandbox/files/signing.test.ts', 'sandbox/secure.test.ts'],
};
/**
 * Cases that run but cannot pass against any server on a host like ours, by file and test
 * title, each with why: they are listed apart and not counted.
 */
const NOT_COUNTED = {
  'sandbox/snapshot.test.ts': {
    'pause and resume a sandbox with http server':
      "getHost(port): E2B's <port>-<id> host name over wildcard DNS and TLS",
  },
  'sandbox/internetAccess.test.ts': {
    'internet access enabled': 'reaches connectivitycheck.gstatic.com: needs the internet',
    'internet access default': 'reaches connectivitycheck.gstatic.com: needs the internet',
  },
  'sandbox/fork.test.ts': {
    'fork with count lower than 1 fails':
      'client-side check of the unreleased SDK (tests HEAD throws before any request); e2b 2.51.0 sends the request with a fake API key, which any server answers 401',
  },
};
/** Unit tests of the SDK's own internals (mocked, or importing its private modules). */
const NOT_SERVER = [
  'sandbox/commands/commandHandle.test.ts',
  'sandbox/files/watchHandle.test.ts',
  'sandbox/git/validation.test.ts',
];

function args(argv) {
  const out = {
    tests: '',
    work: '/work/e2b-suite',
    template: 'base',
    area: '',
    e2b: '2.51.0',
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === '--work') out.work = next();
    else if (a === '--template') out.template = next();
    else if (a === '--area') out.area = next();
    else if (a === '--e2b') out.e2b = next();
    else if (!out.tests) out.tests = a;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!out.tests) {
    throw new Error('give the tests directory of an E2B checkout (packages/js-sdk/tests)');
  }
  if (!existsSync(join(out.tests, 'setup.ts'))) {
    throw new Error(`${out.tests} has no setup.ts: not E2B's packages/js-sdk/tests`);
  }
  for (const v of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL']) {
    if (!process.env[v]) throw new Error(`${v} is not set: point it at forkd's E2B listener`);
  }
  return out;
}

/** The scratch project: E2B's tests, vitest, `e2b`; `../src` resolved to the package. */
function prepare(o) {
  mkdirSync(o.work, { recursive: true });
  const pkg = {
    name: 'e2b-suite-scratch',
    private: true,
    type: 'module',
    dependencies: { e2b: o.e2b, vitest: '^4.1.10', msw: '^2.7.0', dotenv: '^16.4.5' },
  };
  const pkgFile = join(o.work, 'package.json');
  const want = JSON.stringify(pkg, null, 2);
  if (!existsSync(pkgFile) || readFileSync(pkgFile, 'utf8') !== want) {
    writeFileSync(pkgFile, want);
    rmSync(join(o.work, 'node_modules'), { recursive: true, force: true });
  }
  if (!existsSync(join(o.work, 'node_modules', 'vitest'))) {
    const r = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error'], {
      cwd: o.work,
      stdio: 'inherit',
    });
    if (r.status !== 0) throw new Error('npm install failed in ' + o.work);
  }
  rmSync(join(o.work, 'tests'), { recursive: true, force: true });
  cpSync(o.tests, join(o.work, 'tests'), { recursive: true });
  writeFileSync(
    join(o.work, 'tests', 'template.ts'),
    `export const template = ${JSON.stringify(o.template)}\nexport const httpbinTemplate = 'httpbin'\n`,
  );
  writeFileSync(
    join(o.work, 'vitest.config.mjs'),
    `export default {
  resolve: { alias: [{ find: /^(\\.\\.\\/)+src(\\/.*)?$/, replacement: 'e2b' }] },
  test: {
    dir: 'tests',
    testTimeout: 120000,
    hookTimeout: 120000,
    fileParallelism: false,
    environment: 'node',
  },
};\n`,
  );
}

/** The test files of the areas asked for (`--area a,b`; all by default). */
function files(o) {
  const names = o.area ? o.area.split(',') : Object.keys(AREAS);
  const unknown = names.find((a) => !AREAS[a]);
  if (unknown !== undefined) {
    throw new Error(`unknown area ${unknown}: one of ${Object.keys(AREAS).join(', ')}`);
  }
  return names.flatMap((a) => AREAS[a]).map((f) => `tests/${f}`);
}

function areaOf(file) {
  const rel = file.replace(/^.*?\/tests\//, '');
  if (NOT_SERVER.includes(rel)) return undefined;
  for (const [area, list] of Object.entries(AREAS)) {
    if (list.some((f) => (f.endsWith('/') ? rel.startsWith(f) : rel === f))) return area;
  }
  return undefined;
}

function run(o) {
  const out = join(o.work, 'result.json');
  rmSync(out, { force: true });
  const list = files(o);
  spawnSync(
    join(o.work, 'node_modules', '.bin', 'vitest'),
    [
      'run',
      '--reporter=json',
      `--outputFile=${out}`,
      '--reporter=default',
      ...NOT_SERVER.flatMap((n) => ['--exclude', `tests/${n}`]),
      ...list,
    ],
    { cwd: o.work, stdio: 'inherit', env: { ...process.env, FORCE_COLOR: '0' } },
  );
  if (!existsSync(out)) throw new Error('vitest wrote no result (see its output above)');
  return JSON.parse(readFileSync(out, 'utf8'));
}

function report(result) {
  const rows = {};
  const failures = [];
  const apart = [];
  for (const file of result.testResults) {
    const area = areaOf(file.name);
    if (!area) continue;
    const row = (rows[area] ??= { passed: 0, failed: 0, skipped: 0 });
    if (file.assertionResults.length === 0 && file.status === 'failed') {
      row.failed++;
      failures.push(`${area}: ${file.name.replace(/^.*?\/tests\//, '')}: ${file.message}`);
    }
    const rel = file.name.replace(/^.*?\/tests\//, '');
    for (const t of file.assertionResults) {
      const notCounted = NOT_COUNTED[rel]?.[t.title];
      if (notCounted) {
        apart.push(`${area}: ${t.fullName}: ${t.status}, not counted: ${notCounted}`);
        continue;
      }
      if (t.status === 'passed') row.passed++;
      else if (t.status === 'failed') {
        row.failed++;
        const why = (t.failureMessages[0] ?? '').split('\n')[0].slice(0, 160);
        failures.push(`${area}: ${t.fullName}: ${why}`);
      } else row.skipped++;
    }
  }
  console.log('\narea          passed  failed  skipped  pass %');
  const total = { passed: 0, failed: 0, skipped: 0 };
  for (const [area, r] of Object.entries(rows)) {
    for (const k of Object.keys(total)) total[k] += r[k];
    console.log(line(area, r));
  }
  console.log(line('total', total));
  if (apart.length) console.log('\nnot counted:\n  ' + apart.join('\n  '));
  if (failures.length) console.log('\nfailed:\n  ' + failures.join('\n  '));
}

function line(name, r) {
  const ran = r.passed + r.failed;
  const pct = ran ? ((100 * r.passed) / ran).toFixed(1) : '-';
  return `${name.padEnd(13)} ${String(r.passed).padStart(6)}  ${String(r.failed).padStart(6)}  ${String(r.skipped).padStart(7)}  ${pct.padStart(6)}`;
}

try {
  const o = args(process.argv.slice(2));
  o.tests = resolve(o.tests);
  prepare(o);
  report(run(o));
} catch (e) {
  console.error(`e2b-suite: ${e instanceof Error ? e.message : e}`);
  process.exit(2);
}
