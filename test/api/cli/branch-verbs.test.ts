/**
 * The CLI's branch, chain and lineage verbs — `forkd branch`, `tree`, `snapshot diff`,
 * `snapshot compact`, `snapshot info` on a chain, `rmi --cascade` — run as a user runs them,
 * against the API app over the fake services on a unix socket (FORKD_URL): human output and
 * `--json`, exit codes, what reached the daemon, and that `diff` never leaves its child
 * running. The same verbs against real VMs are the end-to-end tests' job.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cliOverFakes, out } from '../../helpers/fake-cli.js';
import { SEED } from '../../helpers/fake-services.js';

const { fake, forkd, json } = cliOverFakes('forkd-cli-branch-');
const calls = (method: string) => fake.serviceCalls().filter((c) => c.method === method);

/** Live sandbox ids. */
async function live(): Promise<string[]> {
  return (await json<{ id: string }[]>('ps')).map((s) => s.id);
}

/** warm → b1 (branched from a child of warm), with one child of b1 running. */
async function chain(): Promise<void> {
  const [child] = out(await forkd('fork', SEED.snapshot))
    .trim()
    .split('\n');
  const r = await forkd('branch', child!, '--tag', 'b1', '--fork', '1');
  assert.equal(r.code, 0, r.stderr);
}

// ---- branch ---------------------------------------------------------------------------

test('branch: the new tag, the pause and MiB captured, then the children', async () => {
  fake.reset();
  const r = await forkd('branch', SEED.sandbox, '--tag', 'b1', '--fork', '2', '--label', 'k=v');
  assert.equal(r.code, 0, r.stderr);
  const [head, ...ids] = out(r).trimEnd().split('\n');
  assert.equal(
    head,
    `branched ${SEED.sandbox} into snapshot b1: paused 42.5 ms (copy), 3.0 MiB captured`,
  );
  assert.equal(ids.length, 2);
  for (const id of ids) assert.match(id, /^sbx-[0-9a-f]{12}$/);
  assert.deepEqual(calls('branch')[0]!.args.slice(0, 2), [
    SEED.sandbox,
    { tag: 'b1', fork: 2, labels: { k: 'v' } },
  ]);
});

test('branch --no-wait says the snapshot is still writing; --json is the BranchResult', async () => {
  fake.reset();
  const r = await forkd('branch', SEED.sandbox, '--no-wait');
  assert.equal(r.code, 0, r.stderr);
  assert.match(out(r), /still writing: `forkd snapshot info \S+` says when it is ready/);
  assert.deepEqual(calls('branch')[0]!.args[1], { no_wait: true });
  const result = await json<{
    snapshot: { tag: string; source_sandbox: string; depth: number };
    pause_ms: number;
    captured_bytes: number;
    timings: Record<string, number>;
    children?: unknown;
  }>('branch', SEED.sandbox, '--tag', 'b2');
  assert.equal(result.snapshot.tag, 'b2');
  assert.equal(result.snapshot.source_sandbox, SEED.sandbox);
  // The source's disk now layers on the first branch, so the second is built on it.
  assert.equal(result.snapshot.depth, 1);
  assert.deepEqual([result.pause_ms, result.captured_bytes], [42.5, 3 * 1024 * 1024]);
  assert.equal(result.children, undefined);
});

test('branch: a failed child exits 1 naming it; bad usage exits 2 before the daemon', async () => {
  fake.reset();
  fake.failingChildren.add(0);
  const r = await forkd('branch', SEED.sandbox, '--fork', '2');
  assert.equal(r.code, 1);
  assert.equal(out(r).trimEnd().split('\n').length, 2, 'the head line and one child');
  assert.match(r.stderr, /child 0: .*\[boot_failed\]/);
  fake.reset();
  assert.equal((await forkd('branch', SEED.sandbox, '--no-wait', '--fork', '1')).code, 2);
  assert.equal((await forkd('branch', SEED.sandbox, '--fork', 'two')).code, 2);
  assert.equal((await forkd('branch', SEED.sandbox, '--label', 'novalue')).code, 2);
  const mode = await forkd('branch', SEED.sandbox, '--mode', 'fast');
  assert.equal(mode.code, 2);
  assert.match(mode.stderr, /--mode must be copy or live, not "fast"/);
  assert.deepEqual(fake.serviceCalls(), []);
  const missing = await forkd('branch', 'sbx-0000000000ff');
  assert.equal(missing.code, 3);
  assert.match(missing.stderr, /\[sandbox_not_found\]/);
});

test('branch --mode live reaches the daemon and the line names the mode', async () => {
  fake.reset();
  const r = await forkd('branch', SEED.sandbox, '--tag', 'l1', '--mode', 'live');
  assert.equal(r.code, 0, r.stderr);
  assert.match(
    out(r),
    /^branched \S+ into snapshot l1: paused 42\.5 ms \(live\), 3\.0 MiB captured$/m,
  );
  assert.deepEqual(calls('branch')[0]!.args[1], { tag: 'l1', mode: 'live' });
});

test('branch --egress none / --no-internet --allow-out reach the daemon as the policy of its children', async () => {
  fake.reset();
  let r = await forkd('branch', SEED.sandbox, '--tag', 'e1', '--egress', 'none');
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(calls('branch')[0]!.args[1], { tag: 'e1', egress: 'none' });
  r = await forkd('branch', SEED.sandbox, '--tag', 'e2', '--no-internet', '--allow-out', 'a.test');
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(calls('branch')[1]!.args[1], {
    tag: 'e2',
    egress: { allow_internet: false, allow_out: ['a.test'] },
  });
  r = await forkd('branch', SEED.sandbox, '--egress', 'none', '--allow-out', 'a.test');
  assert.equal(r.code, 2, 'a contradiction is a usage error before the daemon');
  assert.equal(calls('branch').length, 2);
});

// ---- tree -----------------------------------------------------------------------------

test('tree: a branch hangs under the sandbox it came from, its forks under it', async () => {
  fake.reset();
  await chain();
  const r = await forkd('tree');
  assert.equal(r.code, 0, r.stderr);
  const lines = out(r)
    .trimEnd()
    .replaceAll(/sbx-0{9}1[0-9a-f]{2}/g, 'CHILD')
    .split('\n');
  assert.deepEqual(lines, [
    `image ${SEED.image}`,
    `├── snapshot ${SEED.snapshot} (ready)`,
    '│   └── sandbox CHILD (running)',
    '│       └── snapshot b1 (ready)',
    '│           └── sandbox CHILD (running)',
    `├── snapshot ${SEED.brokenSnapshot} (ready)`,
    `└── sandbox ${SEED.sandbox} (running)`,
  ]);
});

test('tree: two branches of one sandbox are siblings; a branch of a branch nests', async () => {
  fake.reset();
  await chain(); // warm → child → b1 → grandchild
  const [child, grandchild] = (await json<{ id: string; snapshot: string }[]>('ps'))
    .filter((s) => s.snapshot)
    .map((s) => s.id);
  assert.equal((await forkd('branch', child!, '--tag', 'b2')).code, 0);
  assert.equal((await forkd('branch', grandchild!, '--tag', 'b3')).code, 0);
  const drawn = async () =>
    out(await forkd('tree', SEED.snapshot))
      .trimEnd()
      .replaceAll(child!, 'CHILD')
      .replaceAll(grandchild!, 'GRANDCHILD')
      .split('\n');
  assert.deepEqual(await drawn(), [
    `(image ${SEED.image})`,
    `└── snapshot ${SEED.snapshot} (ready)`,
    '    └── sandbox CHILD (running)',
    '        ├── snapshot b1 (ready)',
    '        │   └── sandbox GRANDCHILD (running)',
    '        │       └── snapshot b3 (ready)',
    '        └── snapshot b2 (ready)',
  ]);
  // Its source gone, a branch hangs under the snapshot the source was forked from.
  assert.equal((await forkd('kill', child!)).code, 0);
  assert.deepEqual(await drawn(), [
    `(image ${SEED.image})`,
    `└── snapshot ${SEED.snapshot} (ready)`,
    '    ├── snapshot b1 (ready)',
    '    │   └── sandbox GRANDCHILD (running)',
    '    │       └── snapshot b3 (ready)',
    '    └── snapshot b2 (ready)',
  ]);
});

test('tree TAG: only what came from it, hung under its origin; --json the drawn edges', async () => {
  fake.reset();
  await chain();
  const r = await forkd('tree', 'b1');
  assert.equal(r.code, 0, r.stderr);
  const lines = out(r).trimEnd().split('\n');
  assert.match(lines[0]!, /^\(sandbox sbx-0{9}1[0-9a-f]{2}\)$/);
  assert.equal(lines[1], '└── snapshot b1 (ready)');
  assert.equal(lines.length, 3);
  const { nodes } = await json<{
    nodes: { kind: string; id: string; parent: { kind: string } | null; created_at: string }[];
  }>('tree');
  const b1 = nodes.find((n) => n.kind === 'snapshot' && n.id === 'b1');
  assert.ok(b1 && 'created_at' in b1);
  assert.equal(b1.parent?.kind, 'sandbox');
  const missing = await forkd('tree', 'nope');
  assert.equal(missing.code, 3);
  assert.match(missing.stderr, /\[snapshot_not_found\]/);
});

// ---- chains ---------------------------------------------------------------------------

/** `forkd snapshot diff --from warm --tag TAG [--exec CMD]`. */
function diff(tag: string, exec?: string) {
  const args = ['snapshot', 'diff', '--from', SEED.snapshot, '--tag', tag];
  return forkd(...args, ...(exec === undefined ? [] : ['--exec', exec]));
}

test('snapshot diff: fork, run, branch, kill; prints only the new tag', async () => {
  fake.reset();
  const before = await live();
  const r = await diff('pkg', 'echo installed');
  assert.equal(r.code, 0, r.stderr);
  assert.equal(out(r), 'pkg\n');
  assert.match(r.stderr, /echo installed/, "the command's output goes to stderr");
  const [fork] = calls('fork');
  assert.equal((fork!.args[0] as { snapshot: string }).snapshot, SEED.snapshot);
  const [branch] = calls('branch');
  assert.deepEqual(branch!.args[1], { tag: 'pkg' });
  assert.deepEqual(await live(), before, 'the child was killed');
  const info = await json<{ parent: string; depth: number }>('snapshot', 'info', 'pkg');
  assert.deepEqual([info.parent, info.depth], [SEED.snapshot, 1]);
});

test('snapshot diff: a failing command branches nothing, kills the child, exits with its code', async () => {
  fake.reset();
  const before = await live();
  const r = await diff('x', 'exit 3');
  assert.equal(r.code, 3);
  assert.equal(out(r), '');
  assert.match(r.stderr, /`exit 3` failed in a child of warm: nothing branched/);
  assert.deepEqual(calls('branch'), []);
  assert.deepEqual(await live(), before);
  const taken = await diff(SEED.brokenSnapshot, 'true');
  assert.equal(taken.code, 4);
  assert.match(taken.stderr, /\[name_taken\]/);
  assert.deepEqual(await live(), before, 'killed after a failed branch too');
  assert.equal((await diff('y')).code, 2);
});

test('snapshot info shows depth, ancestors and dependents; compact makes a standalone one', async () => {
  fake.reset();
  await chain();
  const warm = out(await forkd('snapshot', 'info', SEED.snapshot));
  assert.match(warm, /^depth\s+0 \(standalone\)$/m);
  assert.match(warm, /^dependents\s+b1$/m);
  const b1 = out(await forkd('snapshot', 'info', 'b1'));
  assert.match(b1, /^depth\s+1 \(a layer over warm\)$/m);
  assert.match(b1, /^ancestors\s+warm$/m);
  assert.match(warm, /^memory stored\s+full: 256 MiB logical, 61 MiB stored$/m);
  assert.match(
    b1,
    /^memory stored\s+diff over warm \(depth 1\): 256 MiB logical, 6\.0 MiB stored, not materialized$/m,
  );
  const b1json = await json<{ memory: { kind: string; stored_bytes: number } }>(
    'snapshot',
    'info',
    'b1',
  );
  assert.deepEqual(b1json.memory, { ...b1json.memory, kind: 'diff', stored_bytes: 6 * 1048576 });
  const r = await forkd('snapshot', 'compact', 'b1', '--to', 'flat');
  assert.equal(r.code, 0, r.stderr);
  assert.match(out(r), /^snapshot flat: /);
  assert.deepEqual(calls('compact')[0]!.args.slice(0, 2), ['b1', 'flat']);
  const flat = await json<{ parent: string | null; depth: number }>('snapshot', 'info', 'flat');
  assert.deepEqual([flat.parent, flat.depth], [null, 0]);
  assert.equal((await forkd('snapshot', 'compact', 'b1')).code, 2, '--to is required');
});

test('rmi refuses to orphan (naming the dependents); --cascade --force removes the subtree', async () => {
  fake.reset();
  await chain();
  const refused = await forkd('rmi', SEED.snapshot);
  assert.equal(refused.code, 4);
  assert.match(refused.stderr, /built on warm: b1\b.*\[snapshot_in_use\]/);
  const r = await forkd('rmi', SEED.snapshot, '--cascade', '--force');
  assert.deepEqual([r.code, out(r)], [0, 'removed snapshot warm and its subtree\n']);
  assert.deepEqual(calls('remove').at(-1)!.args, [SEED.snapshot, { force: true, cascade: true }]);
  const left = await json<{ tag: string }[]>('snapshots');
  assert.deepEqual(
    left.map((s) => s.tag),
    [SEED.brokenSnapshot],
  );
});
