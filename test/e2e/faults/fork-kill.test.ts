/**
 * QEMU SIGKILLed during a fork of N: a child's QEMU is killed (by its pid, found under this
 * test's home) while the fork restores it. The fork answers with that child in `failed`
 * (a catalog error) and the others running, or, with all_or_nothing, fails and leaves no
 * child at all; the killed child leaves no QEMU, sandbox dir or cgroup, and is not listed
 * as running.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
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
    const alive = await runningIds();
    for (const f of outcome.failed) {
      assert.ok(
        isForkdError(f.error) && ERROR_CATALOG[f.error.code],
        `failed[${f.index}]: ${String(f.error)}`,
      );
      assert.notEqual(f.error.code, 'internal', f.error.message);
    }
    // The kill may land just after a child came up: then it must be reported dead, not running.
    assert.equal(
      outcome.failed.length + alive.length,
      3,
      `killed ${killed}: ${JSON.stringify(outcome.failed)}`,
    );
    assert.ok(alive.length >= 2);
    for (const id of alive) assert.equal(await sh(s!, id, 'echo up'), 'up\n');
    assert.ok(!(await qemusUnder(home.dir)).includes(killed));
    for (const id of alive) await s!.sandboxes.kill(id);
    assert.deepEqual(await qemusUnder(home.dir), []);
  },
);

test(
  'with all_or_nothing the fork fails with a catalog error and no child is left',
  { timeout: 300_000 },
  async () => {
    const known = new Set(await qemusUnder(home.dir));
    const forking = s!.snapshots
      .fork({ snapshot: 'base', n: 3, all_or_nothing: true }, caller)
      .then(
        (o) => o,
        (e: unknown) => (e instanceof Error ? e : new Error(String(e))),
      );
    await killNewQemu(known);
    const outcome = await forking;
    if (outcome instanceof Error) {
      assert.ok(isForkdError(outcome) && ERROR_CATALOG[outcome.code], String(outcome));
    } else {
      // The all-or-nothing answer names the failure and holds no child.
      assert.ok(outcome.failed.length >= 1, JSON.stringify(outcome));
      assert.deepEqual(outcome.sandboxes, []);
    }
    await sleep(500);
    assert.deepEqual(await runningIds(), []);
    assert.deepEqual(await qemusUnder(home.dir), []);
  },
);
