/**
 * `forkd run` end to end: each case boots a real microVM (TCG here) from the busybox image
 * through the CLI, and every case checks that nothing is left behind; one checks the VM's
 * cgroup and limits while it runs.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { forkd } from '../../helpers/cli.js';
import { cgroupState, homeCgroup, type CgroupState } from '../../helpers/cgroups.js';

let home: TestHome;
before(async () => {
  home = await makeTestHome();
});
after(async () => {
  await home.cleanup();
});

const run = (args: string[], input?: string) => forkd(['run', ...args], { env: home.env, input });

test('forkd run -- echo hello prints hello and exits 0', async () => {
  const r = await run(['--', 'echo', 'hello']);
  assert.equal(r.stdout.toString(), 'hello\n', r.stderr);
  assert.equal(r.code, 0);
  await assertNoLeftovers(home);
});

test('the exit code of the command is the exit code of forkd run', async () => {
  const r = await run(['--', 'sh', '-c', 'exit 7']);
  assert.equal(r.code, 7, r.stderr);
  await assertNoLeftovers(home);
});

test('a command that does not exist gives a clear error and exit 127', async () => {
  const r = await run(['--', 'no-such-command']);
  assert.equal(r.code, 127);
  assert.match(r.stderr, /no-such-command: command not found/);
  await assertNoLeftovers(home);
});

test('stdin is piped through', async () => {
  const r = await run(['--', 'wc', '-l'], 'a\nb\n');
  assert.equal(r.stdout.toString().trim(), '2', r.stderr);
  assert.equal(r.code, 0);
});

test('20 MB of output arrives intact and stdout/stderr stay apart', async () => {
  const script = 'yes forkd-line-0123456789 | head -c 20000000; echo to-stderr >&2';
  const r = await run(['--', 'sh', '-c', script]);
  assert.equal(r.code, 0, r.stderr);
  const expected = Buffer.alloc(20_000_000, 'forkd-line-0123456789\n');
  const hash = (b: Buffer) => createHash('sha256').update(b).digest('hex');
  assert.equal(r.stdout.length, expected.length);
  assert.equal(hash(r.stdout), hash(expected));
  assert.equal(r.stderr, 'to-stderr\n');
  await assertNoLeftovers(home);
});

test('--timeout kills the command and exits 124; the VM ran in a cgroup with the limits asked for', async () => {
  const limits = ['--memory-limit', '600M', '--cpu-limit', '0.5', '--pids-limit', '100'];
  const running = run(['--timeout', '2', ...limits, '--', 'sleep', '60']);
  // While it runs (boot and the 2 s of sleep), its QEMU is in a cgroup of its own.
  const parent = await homeCgroup(home.paths.home, true);
  assert.ok(parent, 'this host has cgroups');
  let seen: CgroupState | undefined;
  let done = false;
  void running.finally(() => (done = true));
  while (!seen && !done) {
    const [name] = await parent.children().catch(() => []);
    const st = name ? await cgroupState(parent, name).catch(() => undefined) : undefined;
    if (st?.procs.length) seen = st;
    else await sleep(100);
  }
  const r = await running;
  assert.equal(r.code, 124, r.stderr);
  assert.match(r.stderr, /timed out after 2 s/);
  assert.ok(seen, 'no cgroup with a process was seen while forkd run ran');
  assert.deepEqual(
    { ...seen, procs: seen.procs.length },
    { memoryBytes: 600 * 1024 * 1024, cpu: 0.5, pids: 100, procs: 1 },
  );
  await assertNoLeftovers(home); // its cgroup (and the parent) went with it
});

test('bad input is refused before anything boots', async () => {
  for (const args of [
    ['--memory', 'lots', '--', 'true'],
    ['--memory', '8', '--', 'true'],
    ['--cpus', '0', '--', 'true'],
    ['--image', 'no-such-image', '--', 'true'],
    ['--image', '../etc', '--', 'true'],
    ['--env', 'NOEQUALS', '--', 'true'],
  ]) {
    const r = await run(args);
    assert.notEqual(r.code, 0, args.join(' '));
    assert.match(r.stderr, /\[(bad_request|image_not_found)\]/, args.join(' '));
  }
  await assertNoLeftovers(home);
});

test('--env reaches the command', async () => {
  const r = await run([
    '--env',
    'GREETING=hi there',
    '--',
    'sh',
    '-c',
    'echo "$GREETING $FORKD_SANDBOX_ID"',
  ]);
  assert.match(r.stdout.toString(), /^hi there sbx-[0-9a-f]{12}\n$/);
});
