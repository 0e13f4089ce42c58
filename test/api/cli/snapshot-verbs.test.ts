/**
 * The CLI's snapshot verbs — `forkd snapshot create|info|verify|pool`, `snapshots`, `fork`,
 * `rmi`, `ps --pool` — run as a user runs them, against the API app over the fake services
 * on a unix socket (FORKD_URL): tables and `--json`, progress on stderr, exit codes, partial
 * fork failures, Ctrl-C during a create reaching the daemon as an abort, what every verb
 * says of a failed or unfinished snapshot, and pool VMs made visible. The same verbs
 * against real VMs are the end-to-end tests' job.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { CLI } from '../../helpers/cli.js';
import { cliOverFakes, out } from '../../helpers/fake-cli.js';
import { SEED } from '../../helpers/fake-services.js';

const { fake, env, forkd, json } = cliOverFakes('forkd-cli-snap-');
const MiB = 1024 * 1024;

test('snapshot create: progress on stderr, a summary on stdout; --json the snapshot', async () => {
  fake.reset();
  const r = await forkd(
    'snapshot',
    'create',
    '--tag',
    'py',
    '--image',
    SEED.image,
    '--memory',
    '1G',
    '--warm',
    'echo one',
    '--warm',
    'echo two',
    '--wait-port',
    '8080',
    '--wait-timeout',
    '30',
    '-e',
    'A=1',
    '--label',
    'team=a',
  );
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /booting base\n.*warm: echo one\n.*warm: echo two\n.*capturing/s);
  assert.match(out(r), /^snapshot py: 1024 MiB guest, .* on disk, from image base/);
  const create = fake.serviceCalls().find((c) => c.method === 'create')!;
  assert.deepEqual(create.args[0], {
    tag: 'py',
    image: SEED.image,
    memory_mib: 1024,
    env: { A: '1' },
    warm: ['echo one', 'echo two'],
    wait_port: 8080,
    wait_timeout_s: 30,
    labels: { team: 'a' },
  });
  const quiet = await forkd('snapshot', 'create', '--tag', 'py2', '--json');
  assert.equal(quiet.code, 0, quiet.stderr);
  assert.equal(quiet.stderr, '', '--json prints no progress');
  assert.equal((JSON.parse(out(quiet)) as { tag: string }).tag, 'py2');
});

test('snapshot create: bad usage exits 2; a daemon refusal exits 1 with its code', async () => {
  fake.reset();
  assert.equal((await forkd('snapshot', 'create')).code, 2);
  const both = await forkd(
    'snapshot',
    'create',
    '--tag',
    'x',
    '--wait-for',
    'true',
    '--wait-port',
    '1',
  );
  assert.equal(both.code, 2);
  assert.equal((await forkd('snapshot', 'create', '--tag', 'x', '--cpus', 'two')).code, 2);
  assert.deepEqual(fake.serviceCalls(), []);
  const taken = await forkd('snapshot', 'create', '--tag', SEED.snapshot);
  assert.equal(taken.code, 4);
  assert.match(taken.stderr, /\[name_taken\]/);
  const failed = await forkd('snapshot', 'create', '--tag', 'bad', '--warm', 'false');
  assert.equal(failed.code, 1);
  assert.match(failed.stderr, /warm: false\n.*\[guest_error\]/s);
});

test('Ctrl-C during snapshot create aborts it at the daemon and exits 130', async () => {
  fake.reset();
  const child = spawn(
    process.execPath,
    [CLI, 'snapshot', 'create', '--tag', 'gone', '--warm', 'forever'],
    { env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  for (let i = 0; i < 300 && !stderr.includes('still warming'); i++) await sleep(10);
  child.kill('SIGINT');
  assert.equal(await exited, 130, stderr);
  assert.match(stderr, /interrupted/);
  for (let i = 0; i < 300 && !fake.createAborted; i++) await sleep(10);
  assert.ok(fake.createAborted, 'the daemon side saw the abort');
});

test('snapshots: a table; a snapshot that cannot be forked is named with the reason', async () => {
  fake.reset();
  await forkd('fork', SEED.snapshot, '-n', '2');
  const r = await forkd('snapshots');
  assert.equal(r.code, 0, r.stderr);
  const [header, ...rows] = out(r).trimEnd().split('\n');
  assert.match(
    header!,
    /^TAG\s+STATE\s+IMAGE\s+MEMORY\s+DISK\s+CREATED\s+CHILDREN\s+LABELS\s+ORIGIN$/,
  );
  assert.match(
    rows[0]!,
    /^warm\s+ready\s+base\s+256M\s+63 MiB\s+1970-01-01 00:00\s+2\s+team=a\s+-$/,
  );
  assert.match(rows[1]!, /^broken\s+not bootable\s+base\s/);
  assert.match(r.stderr, /snapshot broken cannot be forked: not bootable: memory is missing/);
  const list = await json<{ tag: string; children_alive: number }[]>('snapshots');
  assert.deepEqual(
    list.map((s) => [s.tag, s.children_alive]),
    [
      ['warm', 2],
      ['broken', 0],
    ],
  );
});

test('snapshot info: fields, files with logical and physical sizes; --json', async () => {
  fake.reset();
  const r = await forkd('snapshot', 'info', SEED.snapshot);
  assert.equal(r.code, 0, r.stderr);
  const text = out(r);
  assert.match(text, /^tag\s+warm$/m);
  assert.match(text, /^state\s+ready, bootable$/m);
  assert.match(text, /^pool\s+0 of 0 ready$/m);
  assert.match(text, /^size\s+258 MiB logical, 63 MiB on disk$/m);
  assert.match(text, /^memory\s+256 MiB\s+61 MiB\s+a{64}$/m);
  const broken = await forkd('snapshot', 'info', SEED.brokenSnapshot);
  assert.match(out(broken), /^state\s+not bootable: memory is missing/m);
  const info = await json<{ files: { name: string; allocated: number }[] }>(
    'snapshot',
    'info',
    SEED.snapshot,
  );
  assert.deepEqual(
    info.files.map((f) => f.name),
    ['memory', 'vmstate', 'disk.qcow2'],
  );
  const missing = await forkd('snapshot', 'info', 'nope');
  assert.equal(missing.code, 3);
  assert.match(missing.stderr, /\[snapshot_not_found\]/);
});

test('snapshot verify exits 1 with the problems; snapshot pool sets the size', async () => {
  fake.reset();
  const ok = await forkd('snapshot', 'verify', SEED.snapshot);
  assert.deepEqual([ok.code, out(ok)], [0, 'snapshot warm: ok\n']);
  const bad = await forkd('snapshot', 'verify', SEED.brokenSnapshot);
  assert.equal(bad.code, 1);
  assert.equal(out(bad), 'memory: missing\n');
  const pool = await forkd('snapshot', 'pool', SEED.snapshot, '3');
  assert.deepEqual([pool.code, out(pool)], [0, 'pool of warm: 3 (3 ready now)\n']);
  assert.equal((await forkd('snapshot', 'pool', SEED.snapshot, '-1')).code, 2);
});

test('fork prints the children, one per line; a partial failure exits 1 naming it', async () => {
  fake.reset();
  const r = await forkd('fork', SEED.snapshot, '-n', '3', '--label', 'run=7', '--timeout', '60');
  assert.equal(r.code, 0, r.stderr);
  const ids = out(r).trimEnd().split('\n');
  assert.equal(ids.length, 3);
  for (const id of ids) assert.match(id, /^sbx-[0-9a-f]{12}$/);
  const call = fake.serviceCalls().find((c) => c.method === 'fork')!;
  assert.deepEqual(call.args[0], {
    snapshot: SEED.snapshot,
    n: 3,
    labels: { run: '7' },
    env: {},
    timeout_s: 60,
  });
  fake.failingChildren.add(1);
  const partial = await forkd('fork', SEED.snapshot, '-n', '3');
  assert.equal(partial.code, 1);
  assert.equal(out(partial).trimEnd().split('\n').length, 2);
  assert.match(partial.stderr, /child 1: .*\[boot_failed\]/);
  const all = await forkd('fork', SEED.snapshot, '-n', '3', '--all-or-nothing', '--json');
  assert.equal(all.code, 1);
  const result = JSON.parse(out(all)) as { sandboxes: unknown[]; failed: { index: number }[] };
  assert.deepEqual(result.sandboxes, []);
  assert.deepEqual(
    result.failed.map((f) => f.index),
    [1],
  );
  assert.equal((await forkd('fork', SEED.snapshot, '-n', '0')).code, 2);
});

test('rmi refuses while children run, --force kills them', async () => {
  fake.reset();
  await forkd('fork', SEED.snapshot, '-n', '2');
  const refused = await forkd('rmi', SEED.snapshot);
  assert.equal(refused.code, 4);
  assert.match(refused.stderr, /\[snapshot_in_use\]/);
  const forced = await forkd('rmi', SEED.snapshot, '--force');
  assert.deepEqual([forced.code, out(forced)], [0, 'removed snapshot warm\n']);
  const list = await json<{ tag: string }[]>('snapshots');
  assert.deepEqual(
    list.map((s) => s.tag),
    ['broken'],
  );
});

/** Why the fake's failed branch failed (the registry's words after a daemon stop). */
const CUT = 'the daemon stopped before this branch was published';

test('a failed branch is listed failed with why; every verb given it says so and how to remove it', async () => {
  fake.reset();
  fake.addFailedSnapshot('cut', CUT);
  const list = await forkd('snapshots');
  assert.equal(list.code, 0, list.stderr);
  const row = out(list)
    .split('\n')
    .find((l) => l.startsWith('cut '));
  assert.match(row ?? '', /^cut\s+failed\s+base\s+256M\s+-\s+1970-01-01 00:00\s+-\s/);
  assert.match(
    list.stderr,
    /snapshot cut cannot be forked: failed: the daemon stopped .*; remove it with `forkd rmi cut`/,
  );
  const info = await forkd('snapshot', 'info', 'cut');
  assert.match(
    out(info),
    /^state\s+failed: the daemon stopped .*; remove it with `forkd rmi cut`$/m,
  );
  assert.doesNotMatch(out(info), /^(size|pool|FILE)\s/m, 'no files, no pool: nothing to show');
  for (const args of [
    ['snapshot', 'verify', 'cut'],
    ['fork', 'cut'],
    ['snapshot', 'pool', 'cut', '1'],
    ['snapshot', 'compact', 'cut', '--to', 'flat'],
    ['push', 'cut', 'localhost:5000/cut:1'],
  ]) {
    const r = await forkd(...args);
    assert.equal(r.code, 4, `${args.join(' ')}: ${r.stderr}`);
    assert.match(
      r.stderr,
      /snapshot "cut" failed and cannot be used: the daemon stopped .*; remove it with `forkd rmi cut` \[snapshot_failed\]/,
      args.join(' '),
    );
  }
  const json = await forkd('fork', 'cut', '--json');
  const body = JSON.parse(json.stderr.toString()) as {
    error: { code: string; details: { reason: string } };
  };
  assert.deepEqual([body.error.code, body.error.details.reason], ['snapshot_failed', CUT]);
  const rmi = await forkd('rmi', 'cut');
  assert.equal(rmi.code, 0, rmi.stderr);
  assert.doesNotMatch(out(await forkd('snapshots')), /^cut /m);
});

test('a snapshot still being written is listed writing; a fork of it says so', async () => {
  fake.reset();
  const branched = await forkd('branch', SEED.sandbox, '--tag', 'later', '--no-wait');
  assert.equal(branched.code, 0, branched.stderr);
  const list = await forkd('snapshots');
  assert.match(out(list), /^later\s+writing\s/m);
  assert.match(
    list.stderr,
    /snapshot later cannot be forked: writing; `forkd snapshot info later`/,
  );
  const r = await forkd('fork', 'later');
  assert.equal(r.code, 4);
  assert.match(r.stderr, /snapshot "later" is still being written: .* \[snapshot_writing\]/);
});

test('a branch has no children until something is forked from it (its source is not one)', async () => {
  fake.reset();
  const branched = await forkd('branch', SEED.sandbox, '--tag', 'step');
  assert.equal(branched.code, 0, branched.stderr);
  const children = async () =>
    (await json<{ tag: string; children_alive: number }[]>('snapshots')).find(
      (s) => s.tag === 'step',
    )?.children_alive;
  assert.equal(await children(), 0, 'the source layers on its branch but is no child of it');
  assert.match(out(await forkd('snapshot', 'info', 'step')), /^children\s+0 alive$/m);
  assert.equal((await forkd('fork', 'step')).code, 0);
  assert.equal(await children(), 1);
  const refused = await forkd('rmi', 'step');
  assert.equal(refused.code, 4, 'the child forked from it still holds it');
});

test('snapshot create says it started a pool and how to turn it off; ps counts pool VMs', async () => {
  fake.reset();
  fake.defaultPool = 2;
  const made = await forkd('snapshot', 'create', '--tag', 'pooled');
  assert.equal(made.code, 0, made.stderr);
  assert.match(
    made.stderr,
    /started a pre-warmed pool of 2 VMs for fast forks \(not sandboxes: `forkd ps --pool` shows them\); `forkd snapshot pool pooled 0` removes it, `forkd daemon --default-pool 0` starts none/,
  );
  assert.equal((await forkd('snapshot', 'pool', 'pooled', '2', '--prewarm')).code, 0);
  const ps = await forkd('ps');
  assert.equal(ps.code, 0, ps.stderr);
  assert.match(
    ps.stderr,
    /^\+ 2 pool VMs waiting for forks \(pooled 2\), not sandboxes: `forkd ps --pool`$/m,
  );
  const pools = await forkd('ps', '--pool');
  assert.equal(pools.code, 0, pools.stderr);
  const [header, row] = out(pools).trimEnd().split('\n');
  assert.match(header!, /^SNAPSHOT\s+READY\s+SIZE\s+HELD\s+KIND\s+MEMORY$/);
  assert.match(row!, /^pooled\s+2\s+2\s+0\s+pre-warmed\s+32 MiB$/);
  assert.match(
    pools.stderr,
    /^pool budget: 2 of 8 VMs, 32 MiB of 384 MiB; the least recently forked/m,
  );
  const budget = { vms: 8, memory_bytes: 384 * MiB, used_vms: 2, used_memory_bytes: 32 * MiB };
  assert.deepEqual(await json('ps', '--pool'), [
    {
      tag: 'pooled',
      pool: { size: 2, ready: 2, prewarm: true, memory_bytes: 32 * MiB, held: 0, budget },
    },
  ]);
  const info = await forkd('snapshot', 'info', 'pooled');
  assert.match(out(info), /^pool\s+2 of 2 ready, pre-warmed, 32 MiB of host memory$/m);
  assert.match(out(info), /^pool budget\s+2 of 8 VMs, 32 MiB of 384 MiB, all snapshots$/m);
  assert.equal((await forkd('snapshot', 'pool', 'pooled', '0')).code, 0);
  assert.doesNotMatch((await forkd('ps')).stderr, /pool VM/);
  fake.defaultPool = 0;
  const quiet = await forkd('snapshot', 'create', '--tag', 'unpooled');
  assert.doesNotMatch(quiet.stderr, /pool/);
});
