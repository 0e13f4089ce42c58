/**
 * The one exit-code table (src/cli/exit.ts, docs/cli.md "Exit codes") driven over every
 * verb, as a user meets it: bad usage exits 2 before anything is sent, an unknown thing 3,
 * a refusal 4, no daemon 5, a busy daemon 6, a command that cannot start 126 and a missing
 * one 127; errors name the flag as typed and what it accepts, never a JSON pointer or a
 * pattern. Against the API app over the fake services (and a socket nobody listens on).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ERROR_CATALOG, ForkdError, type ErrorCode } from '@forkd/sdk';
import { EXIT, exitFor } from '../../../src/cli/exit.js';
import { userMessage } from '../../../src/cli/report.js';
import { CLI, forkd as runCli } from '../../helpers/cli.js';
import { cliOverFakes } from '../../helpers/fake-cli.js';
import { SEED } from '../../helpers/fake-services.js';

const { fake, env, forkd } = cliOverFakes('forkd-cli-exit-');
const NOBODY = 'sbx-0000000000ff';

interface Case {
  args: string[];
  exit: number;
  /** What stderr must say (the flag and the rule, or the code). */
  says?: RegExp;
  /** Makes the fake fail first: [service, method, code, details]. */
  fail?: ['sandboxes' | 'snapshots' | 'images', string, ErrorCode, Record<string, unknown>?];
  /** A usage error only the daemon's answer reveals (the path is a directory). */
  asksDaemon?: true;
}

/** At least one case per verb; between them every class of the table. */
const CASES: Case[] = [
  { args: [], exit: EXIT.usage },
  { args: ['frobnicate'], exit: EXIT.usage, says: /unknown command 'frobnicate'/ },
  { args: ['--version'], exit: EXIT.ok },
  { args: ['help', 'exec'], exit: EXIT.ok },
  { args: ['version'], exit: EXIT.ok },
  { args: ['run'], exit: EXIT.usage, says: /missing the command/ },
  {
    args: ['run', '--memory', '8M', '--', 'true'],
    exit: EXIT.usage,
    says: /--memory 8M is too small: it must be between 64M and 64G/,
  },
  {
    // A size in K is a size: what is wrong is that it is under the minimum.
    args: ['create', '--memory', '1K'],
    exit: EXIT.usage,
    says: /--memory 1K is too small: it must be between 64M and 64G \[bad_request\]/,
  },
  {
    args: ['create', '--memory', '2X'],
    exit: EXIT.usage,
    says: /--memory "2X": unknown unit "X"; use K, M, G or T/,
  },
  {
    args: ['create', '--cpus', '0'],
    exit: EXIT.usage,
    says: /--cpus must be a whole number from 1 to 64, not "0"/,
  },
  {
    args: ['create', '--timeout', 'soon'],
    exit: EXIT.usage,
    says: /--timeout must be a number of seconds/,
  },
  {
    args: ['create', '--label', 'a b=c'],
    exit: EXIT.usage,
    says: /--label "a b=c" is not KEY=VALUE/,
  },
  {
    args: ['create', '--image', 'Bad/Name'],
    exit: EXIT.usage,
    says: /--image "Bad\/Name" must be 1 to 63 characters/,
  },
  {
    args: ['create', '--memory', '20G'],
    exit: EXIT.usage,
    says: /--memory must be between 64M and the host's 16G \[bad_request\]/,
    fail: [
      'sandboxes',
      'create',
      'bad_request',
      { field: 'memory_mib', min: 64, max: 16384, limit: 'host' },
    ],
  },
  { args: ['create'], exit: EXIT.busy, fail: ['sandboxes', 'create', 'capacity'] },
  { args: ['exec', SEED.sandbox], exit: EXIT.usage, says: /missing required argument 'command'/ },
  {
    args: ['exec', 'my-box', '--', 'true'],
    exit: EXIT.usage,
    says: /"my-box" is not a sandbox id: ids are sbx- and 12 hex digits/,
  },
  {
    args: ['exec', SEED.sandbox, '--cwd', 'tmp', '--', 'true'],
    exit: EXIT.usage,
    says: /--cwd "tmp" must be an absolute path/,
  },
  {
    args: ['exec', SEED.sandbox, '--user', 'Root!', '--', 'true'],
    exit: EXIT.usage,
    says: /--user "Root!" must be a user name/,
  },
  { args: ['exec', NOBODY, '--', 'true'], exit: EXIT.notFound, says: /\[sandbox_not_found\]/ },
  {
    args: ['exec', SEED.sandbox, '--cwd', '/nope', '--', 'true'],
    exit: EXIT.cannotStart,
    says: /--cwd \/nope: no such directory in the sandbox \[cwd_not_found\]/,
    fail: ['sandboxes', 'execStream', 'cwd_not_found', { cwd: '/nope' }],
  },
  {
    args: ['exec', SEED.sandbox, '--user', 'nobody2', '--', 'true'],
    exit: EXIT.cannotStart,
    says: /--user nobody2: no such user .*\[user_not_found\]/,
    fail: ['sandboxes', 'execStream', 'user_not_found', { user: 'nobody2' }],
  },
  {
    args: ['exec', SEED.sandbox, '--', 'nosuch'],
    exit: EXIT.commandNotFound,
    says: /nosuch: command not found in image/,
    fail: ['sandboxes', 'execStream', 'command_not_found'],
  },
  {
    args: ['exec', SEED.sandbox, '--', 'true'],
    exit: EXIT.refused,
    fail: ['sandboxes', 'execStream', 'sandbox_not_running'],
  },
  {
    args: ['ps', '--label', 'no-equals'],
    exit: EXIT.usage,
    says: /--label "no-equals" is not KEY=VALUE/,
  },
  { args: ['cp', 'a', 'b'], exit: EXIT.usage, says: /one of SRC and DST must be a sandbox path/ },
  { args: ['cp', `${SEED.sandbox}:tmp/x`, '-'], exit: EXIT.usage, says: /must be absolute/ },
  { args: ['cp', `${NOBODY}:/etc/hello`, '-'], exit: EXIT.notFound },
  {
    args: ['cp', `${SEED.sandbox}:/etc/nope`, '-'],
    exit: EXIT.notFound,
    says: /\[guest_file_not_found\]/,
  },
  {
    args: ['cp', `${SEED.sandbox}:/etc`, '/tmp/x'],
    exit: EXIT.usage,
    says: /is a directory \(copy it with -r\)/,
    asksDaemon: true,
  },
  { args: ['logs', 'x'], exit: EXIT.usage },
  { args: ['logs', NOBODY], exit: EXIT.notFound },
  {
    args: ['kill'],
    exit: EXIT.usage,
    says: /name the sandboxes to kill, or pass --all or --label/,
  },
  { args: ['kill', 'my-box'], exit: EXIT.usage, says: /"my-box" is not a sandbox id/ },
  { args: ['kill', NOBODY], exit: EXIT.notFound, says: /\[sandbox_not_found\]/ },
  { args: ['image', 'build'], exit: EXIT.usage, says: /missing --name NAME/ },
  { args: ['image', 'rm', 'Bad Name'], exit: EXIT.usage },
  { args: ['images', '--bogus'], exit: EXIT.usage, says: /unknown option '--bogus'/ },
  { args: ['snapshot', 'create'], exit: EXIT.usage, says: /missing --tag TAG/ },
  { args: ['snapshot', 'info', 'nope'], exit: EXIT.notFound, says: /\[snapshot_not_found\]/ },
  {
    args: ['snapshot', 'pool', SEED.snapshot, '99'],
    exit: EXIT.usage,
    says: /the pool size must be a whole number from 0 to 64/,
  },
  { args: ['snapshot', 'compact', SEED.snapshot], exit: EXIT.usage, says: /missing --to NEW/ },
  { args: ['snapshots', '--bogus'], exit: EXIT.usage },
  {
    args: ['fork', SEED.snapshot, '-n', '101'],
    exit: EXIT.usage,
    says: /-n must be a whole number from 1 to 100/,
  },
  { args: ['fork', 'nope'], exit: EXIT.notFound },
  { args: ['fork', SEED.brokenSnapshot], exit: EXIT.refused, says: /\[snapshot_not_bootable\]/ },
  { args: ['branch', 'x'], exit: EXIT.usage },
  { args: ['branch', NOBODY], exit: EXIT.notFound },
  {
    args: ['branch', SEED.sandbox, '--tag', 'warm'],
    exit: EXIT.refused,
    fail: ['snapshots', 'branch', 'name_taken'],
  },
  { args: ['tree', 'nope'], exit: EXIT.notFound },
  { args: ['tree', 'Not A Tag'], exit: EXIT.usage },
  { args: ['rmi', 'nope'], exit: EXIT.notFound },
  {
    args: ['rmi', SEED.snapshot],
    exit: EXIT.refused,
    fail: ['snapshots', 'remove', 'snapshot_in_use'],
  },
  { args: ['daemon', '--log-level', 'loud'], exit: EXIT.usage, says: /--log-level must be one of/ },
  { args: ['doctor', '--bogus'], exit: EXIT.usage },
  {
    args: ['create', '--cpu-limit', 'half'],
    exit: EXIT.usage,
    says: /--cpu-limit must be a number of cores above 0, e\.g\. 0\.5, not "half"/,
  },
  {
    args: ['fork', SEED.snapshot, '--pids-limit', '4'],
    exit: EXIT.usage,
    says: /--pids-limit must be a whole number from 32/,
  },
  {
    args: ['create', '--memory-limit', '512X'],
    exit: EXIT.usage,
    says: /limits\.memory "512X": unknown unit "X"; use K, M, G or T/,
    asksDaemon: true,
  },
  { args: ['info', 'x'], exit: EXIT.usage },
  { args: ['info', NOBODY], exit: EXIT.notFound, says: /\[sandbox_not_found\]/ },
  { args: ['setup', '--bogus'], exit: EXIT.usage },
];

for (const c of CASES) {
  test(`forkd ${c.args.join(' ') || '(nothing)'} exits ${c.exit}`, async () => {
    fake.reset();
    if (c.fail) {
      const [service, method, code, details] = c.fail;
      fake.failWith(service, method, new ForkdError(code, `fake ${code}`, details));
    }
    const r = await forkd(...c.args);
    assert.equal(r.code, c.exit, r.stderr);
    if (c.says) assert.match(r.stderr, c.says);
    assert.doesNotMatch(r.stderr, /body\.|params\.|query\.|\^|\$"|pattern/, 'no pointer, no regex');
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  });
}

test('bad usage is refused before anything reaches the daemon', async () => {
  fake.reset();
  for (const c of CASES.filter((c) => c.exit === EXIT.usage && !c.fail && !c.asksDaemon)) {
    await forkd(...c.args);
  }
  assert.deepEqual(fake.serviceCalls(), []);
});

test('no daemon at the address: every client verb exits 5', async () => {
  const url = `unix:${join(env.FORKD_HOME ?? '/tmp', 'nobody.sock')}`;
  const verbs = [
    ['ps'],
    ['create'],
    ['exec', SEED.sandbox, '--', 'true'],
    ['cp', `${SEED.sandbox}:/etc/hello`, '-'],
    ['logs', SEED.sandbox],
    ['kill', SEED.sandbox],
    ['info', SEED.sandbox],
    ['images'],
    ['snapshots'],
    ['snapshot', 'info', SEED.snapshot],
    ['fork', SEED.snapshot],
    ['branch', SEED.sandbox],
    ['tree'],
    ['rmi', SEED.snapshot],
    ['run', '--', 'true'],
  ];
  for (const args of verbs) {
    const r = await runCli(args, { env: { ...env, FORKD_URL: url } });
    assert.equal(r.code, EXIT.unreachable, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /\[daemon_unreachable\]/);
  }
});

/**
 * Runs forkd with a stdout whose reader is already gone: the read end of its pipe is closed
 * here before the child has even started Node, so its first write meets EPIPE (a `| head
 * -c 0` races: a short output fits the pipe before head exits). Async: the fake daemon
 * answers from this very process.
 */
function closedStdout(args: string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, stderr }));
  });
}

test('a closed stdout ends forkd quietly with 141, whatever the verb prints', async () => {
  fake.reset();
  for (const args of ['ps --all --json', '--help', 'snapshots', 'tree']) {
    const r = await closedStdout(args.split(' '));
    assert.doesNotMatch(r.stderr, /EPIPE|\n\s+at /, args);
    assert.equal(r.status, EXIT.brokenPipe, args);
  }
});

test('every catalog code has its place in the table; docs/cli.md lists every exit code', () => {
  const exits = new Set<number>(Object.values(EXIT));
  for (const code of Object.keys(ERROR_CATALOG) as ErrorCode[])
    assert.ok(exits.has(exitFor(code)), code);
  const doc = readFileSync('docs/cli.md', 'utf8');
  const section = doc.slice(doc.indexOf('### Exit codes'));
  for (const n of exits) assert.match(section, new RegExp(`^\\| \`${n}\` \\|`, 'm'), `exit ${n}`);
});

test("a daemon's validation error is said about the flag, without the pointer or pattern", () => {
  const say = (details: Record<string, unknown>) =>
    userMessage(new ForkdError('bad_request', 'raw', details));
  assert.equal(say({ field: 'body.cpus', reason: 'must be <= 64' }), '--cpus must be <= 64');
  assert.equal(
    say({ field: 'params.id', reason: 'must match pattern "^sbx-[0-9a-f]{12}$"' }),
    'the sandbox id is not in the accepted form (see --help)',
  );
  assert.equal(
    say({ field: 'memory_mib', min: 64, max: 23552, limit: 'host' }),
    "--memory must be between 64M and the host's 23G",
  );
});
