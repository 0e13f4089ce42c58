/**
 * QEMU SIGKILLed during a long operation (by its pid, found under this test's home).
 * A fork of N: a child's QEMU killed while the fork restores it; the fork answers with that
 * child in `failed` (a catalog error) and the others running, or, with all_or_nothing (the
 * kill placed by a hold point between a child's QEMU start and its restore), fails and
 * leaves no child at all; the killed child leaves no QEMU, sandbox dir or cgroup,
 * and is not listed as running. A branch (copy and live): the source's QEMU killed just
 * after the branch began; it completed or failed with a catalog error, nothing half-written
 * is under its tag, and the source is reported dead. A snapshot create: the parent's QEMU
 * killed as it boots; a catalog error, no snapshot, no staging dir.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ERROR_CATALOG, isForkdError } from '../../../src/errors.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';
import { makeTestHome, qemusUnder, type TestHome } from '../../helpers/home.js';

let home: TestHome;
let s: TestServices | undefined;

before(async () => {
  home = await makeTestHome();
  s = await startServices(home);
  await s.snapshots.create({ tag: 'base', image: 'busybox' }, caller);
});

after(() => closeAndCheck(s, home));

/** SIGKILLs the first QEMU under the home that `known` does not hold; returns its pid. */
async function killNewQemu(known: Set<number>, deadlineMs = 60_000): Promise<number> {
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline) {
    const fresh = (await qemusUnder(home.dir)).find((pid) => !known.has(pid));
    if (fresh !== undefined) {
      process.kill(fresh, 'SIGKILL');
      return fresh;
    }
    await sleep(10);
  }
  throw new Error('no child QEMU appeared');
}

/** Waits (10 s at most) until no sandbox whose QEMU had `pid` is listed as running. */
async function reportedDead(pid: number): Promise<void> {
  const running = async () =>
    (await s!.sandboxes.list({})).some((x) => x.pid === pid && x.state === 'running');
  for (let i = 0; i < 100 && (await running()); i++) await sleep(100);
}

/** What a hold point wrote once it holds (60 s at most). */
async function heldDetail(file: string): Promise<string> {
  for (const until = Date.now() + 60_000; Date.now() < until; await sleep(20)) {
    const text = await readFile(file, 'utf8').catch(() => undefined);
    if (text) return text;
  }
  throw new Error('the fork never reached its hold point');
}

async function runningIds(): Promise<string[]> {
  return (await s!.sandboxes.list({})).filter((x) => x.state === 'running').map((x) => x.id);
}

test(
  'a child QEMU killed during fork of 3: it is reported failed or dead, the rest run',
  { timeout: 300_000 },
  async () => {
    const known = new Set(await qemusUnder(home.dir));
    const forking = s!.snapshots.fork({ snapshot: 'base', n: 3 }, caller);
    const killed = await killNewQemu(known);
    const outcome = await forking;
    await reportedDead(killed); // a kill just after a child came up is noticed a moment later
    const alive = await runningIds();
    try {
      for (const f of outcome.failed) {
        assert.ok(
          isForkdError(f.error) && ERROR_CATALOG[f.error.code],
          `failed[${f.index}]: ${String(f.error)}`,
        );
        assert.notEqual(f.error.code, 'internal', f.error.message);
      }
      // The kill may land just after a child came up: then it is one of the fork's sandboxes
      // and must be reported dead, not running.
      const diedAfter = outcome.sandboxes.filter((x) => x.pid === killed);
      assert.ok(!diedAfter.some((x) => alive.includes(x.id)), `killed ${killed} is listed running`);
      assert.equal(
        outcome.failed.length + alive.length + diedAfter.length,
        3,
        `killed ${killed}: ${JSON.stringify(outcome.failed)}`,
      );
      assert.ok(alive.length >= 2);
      for (const id of alive) assert.equal(await sh(s!, id, 'echo up'), 'up\n');
      assert.ok(!(await qemusUnder(home.dir)).includes(killed));
    } finally {
      // A failed check must not leave children running into the next cases.
      for (const id of alive) await s!.sandboxes.kill(id).catch(() => undefined);
    }
    assert.deepEqual(await qemusUnder(home.dir), []);
  },
);

test(
  'with all_or_nothing the fork fails with a catalog error and no child is left',
  { timeout: 300_000 },
  async () => {
    // A hold point stops the first child between its QEMU's start and its restore, so the
    // kill lands inside the fork on any host, however fast or loaded.
    const crash = join(home.dir, 'crash');
    process.env.FORKD_CRASH_FILE = crash;
    await writeFile(crash, 'hold:fork:child-started');
    try {
      const forking = s!.snapshots
        .fork({ snapshot: 'base', n: 3, all_or_nothing: true }, caller)
        .then(
          (o) => o,
          (e: unknown) => (e instanceof Error ? e : new Error(String(e))),
        );
      const pid = Number(await heldDetail(`${crash}.held`));
      process.kill(pid, 'SIGKILL');
      await rm(`${crash}.held`);
      const outcome = await forking;
      if (outcome instanceof Error) {
        assert.ok(isForkdError(outcome) && ERROR_CATALOG[outcome.code], String(outcome));
      } else {
        // The all-or-nothing answer names the failure and holds no child.
        assert.ok(outcome.failed.length >= 1, JSON.stringify(outcome));
        assert.deepEqual(outcome.sandboxes, []);
      }
    } finally {
      delete process.env.FORKD_CRASH_FILE;
      await rm(`${crash}.held`, { force: true });
    }
    await sleep(500);
    assert.deepEqual(await runningIds(), []);
    assert.deepEqual(await qemusUnder(home.dir), []);
  },
);

/** A catalog error other than `internal`, naming what happened. */
function assertClearError(e: unknown, what: string): void {
  assert.ok(isForkdError(e) && ERROR_CATALOG[e.code], `${what}: ${String(e)}`);
  assert.notEqual(e.code, 'internal', `${what}: ${e.message}`);
}

/** Nothing of `tag` is listed, gettable or on disk, and no staging dir is left. */
async function assertNoSnapshot(tag: string): Promise<void> {
  await assert.rejects(s!.snapshots.get(tag), (e) => isForkdError(e, 'snapshot_not_found'));
  assert.ok(!(await s!.snapshots.list()).some((x) => x.tag === tag), `${tag} is listed`);
  const left = (await readdir(home.paths.snapshots)).filter((n) => n === tag || n.startsWith('.'));
  assert.deepEqual(left, [], `${tag}: left in snapshots/`);
}

for (const mode of ['copy', 'live'] as const) {
  test(
    `the source's QEMU killed during a ${mode} branch: done or a clear error, the source reported dead`,
    { timeout: 300_000 },
    async () => {
      const [src] = (await s!.snapshots.fork({ snapshot: 'base', n: 1 }, caller)).sandboxes;
      assert.ok(src?.pid);
      const tag = `killed-${mode}`;
      const branching = s!.branch.branch(src.id, { tag, mode }, caller).then(
        (o) => o,
        (e: unknown) => (e instanceof Error ? e : new Error(String(e))),
      );
      await sleep(50); // inside the lease, the capture or the copy
      process.kill(src.pid, 'SIGKILL');
      const outcome = await branching;
      if (outcome instanceof Error) {
        assertClearError(outcome, `${mode} branch`);
        await assertNoSnapshot(tag);
      } else {
        assert.equal((await s!.snapshots.verify(tag)).ok, true, 'a published branch is whole');
        await s!.snapshots.remove(tag, { force: true });
      }
      let state = (await s!.sandboxes.get(src.id)).state;
      for (let i = 0; i < 100 && state === 'running'; i++) {
        await sleep(100);
        state = (await s!.sandboxes.get(src.id)).state;
      }
      assert.equal(state, 'dead', 'the killed source is not reported dead');
      assert.deepEqual(await qemusUnder(home.dir), []);
    },
  );
}

test(
  "the parent's QEMU killed during snapshot create: a clear error, no snapshot",
  { timeout: 300_000 },
  async () => {
    const known = new Set(await qemusUnder(home.dir));
    const creating = s!.snapshots.create({ tag: 'killed-create', image: 'busybox' }, caller).then(
      () => assert.fail('the snapshot was made without its parent'),
      (e: unknown) => e,
    );
    await killNewQemu(known);
    assertClearError(await creating, 'snapshot create');
    await assertNoSnapshot('killed-create');
    assert.deepEqual(await qemusUnder(home.dir), []);
    assert.deepEqual(await readdir(home.paths.sandboxes), [], 'a sandbox dir was left');
  },
);
