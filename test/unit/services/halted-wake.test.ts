/**
 * A halted sandbox and its wake, without VMs: the halted rows are held from their records
 * at start, and a wake that gets through fails for want of a guest kernel in this home
 * (setup_required), which is enough to see what happened before it.
 * - The wake is a cold boot, so it passes the daemon's boot gate (`--max-booting`) as a
 *   boot from an image does (src/services/sandboxes/halt.ts, gate.ts): past the cap it is
 *   refused at once with `capacity` and stays halted.
 * - Its timeout runs while it is halted (forkd's rule, docs/idle.md), unless the pause held
 *   it (E2B's pause: live.ts holdTimeout); an extend then sets what the wake gives back.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';
import type { Paths } from '../../../src/config.js';
import { isForkdError } from '../../../src/errors.js';
import type { Limiter } from '../../../src/services/limits.js';
import { haltFile, type HaltImage } from '../../../src/services/sandboxes/halt.js';
import { SandboxManager } from '../../../src/services/sandboxes/service.js';
import type { Store } from '../../../src/store/db.js';
import { insertRow, tempStore } from '../../helpers/rows.js';
import { wireVmm } from '../../../src/services/vmm-driver.js';

wireVmm(); // the start's reconcile reads pid files through the VMM

let p: Paths;
let store: Store;
let next = 0;
tempStore('forkd-halt-gate-', (home, s) => {
  p = home;
  store = s;
});

/** A halted sandbox as a halt leaves it: its row and its record, no QEMU. */
async function halted(expiresInS?: number): Promise<string> {
  const id = `sbx-0000000ca1${(next++).toString(16).padStart(2, '0')}`;
  const dir = join(p.sandboxes, id);
  await mkdir(dir, { recursive: true });
  const image: HaltImage = {
    disk: join(dir, 'disk.qcow2'),
    nic: false,
    ports: [],
    halted_at: new Date().toISOString(),
  };
  await writeFile(haltFile(dir), JSON.stringify(image));
  const expires = expiresInS ? new Date(Date.now() + expiresInS * 1000).toISOString() : null;
  insertRow(store, id, dir, { expires_at: expires });
  store.sandboxes.update(id, { tier: 'halted' });
  return id;
}

const limiter = {
  sweep: async () => [],
  remove: async () => undefined,
  enforcement: async () => ({ version: null, reason: 'not in unit tests' }),
} as unknown as Limiter;

/** A manager over this home's rows with `maxBooting`, stopped (and its sandboxes killed) after `fn`. */
async function withManager(maxBooting: number, fn: (m: SandboxManager) => Promise<void>) {
  const m = new SandboxManager({ paths: p, store, limiter, maxBooting, pauseIdleAfterS: 0 });
  await m.start();
  try {
    await fn(m);
  } finally {
    await m.killAll();
    m.detach();
  }
}

const tierOf = (id: string) => store.sandboxes.get(id)?.tier;

type Code = Parameters<typeof isForkdError>[1];
const refusedWith = (r: PromiseSettledResult<unknown>, code: Code) =>
  r.status === 'rejected' && isForkdError(r.reason, code);

test('past --max-booting a halted wake is refused with capacity and stays halted', async () => {
  const [a, b] = [await halted(), await halted()];
  await withManager(1, async (m) => {
    const [first, second] = await Promise.allSettled([m.resume(a), m.resume(b)]);
    assert.ok(refusedWith(first, 'setup_required'), 'the first wake took the slot and booted');
    assert.ok(refusedWith(second, 'capacity'), 'the second is over the gate');
    const err = (second as PromiseRejectedResult).reason as { details?: object };
    assert.deepEqual(err.details, { retry_after_s: 3, limit: 1 });
    for (const id of [a, b]) assert.equal(tierOf(id), 'halted');
    assert.equal(m.load().booting, 0, 'every slot given back');
  });
});

test('a halted wake and a boot from an image share one gate', async () => {
  const id = await halted();
  await withManager(1, async (m) => {
    // The create takes the slot at once (its image check is past the gate); the wake queues
    // behind the sandbox's earlier moves first, then finds the gate full.
    const [boot, wake] = await Promise.allSettled([
      m.create({ image: 'no-such-image', cold: true }, { principal: 'test' }),
      m.resume(id),
    ]);
    assert.ok(refusedWith(boot, 'image_not_found'), 'the boot held the slot');
    assert.ok(refusedWith(wake, 'capacity'), 'the wake is over the gate');
    assert.equal(tierOf(id), 'halted');
  });
});

test('under the gate, wakes of halted sandboxes go on together', async () => {
  const [a, b] = [await halted(), await halted()];
  await withManager(2, async (m) => {
    const results = await Promise.allSettled([m.resume(a), m.resume(b)]);
    assert.ok(results.every((r) => refusedWith(r, 'setup_required')));
  });
});

/** Wait until `check` holds (a timer fires on its own time on a loaded host). */
async function until(what: string, check: () => boolean, timeoutMs = 30_000) {
  for (const end = Date.now() + timeoutMs; !check(); await sleep(100)) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
  }
}

test("a halted sandbox's timeout runs: it is stopped at its deadline", async () => {
  const id = await halted(1);
  await withManager(1, async () => {
    await until('the timeout', () => store.sandboxes.get(id)?.state === 'stopped');
    assert.equal(store.sandboxes.get(id)?.reason, 'timeout');
  });
});

test('a pause that holds the timeout: no deadline until the wake; an extend sets what it gives back', async () => {
  const id = await halted(2);
  await withManager(1, async (m) => {
    const paused = await m.pause(id, { tier: 'halted', holdTimeout: true });
    assert.equal(paused.expires_at, null);
    const held = store.sandboxes.get(id)?.timeout_held_s ?? 0;
    assert.ok(held >= 1 && held <= 2, `what was left of its 2 s: ${held}`);
    await sleep(3000); // past the deadline it had
    assert.equal(store.sandboxes.get(id)?.state, 'running', 'not stopped by the held timeout');
    assert.equal((await m.extend(id, 600)).expires_at, null, 'still held');
    assert.equal(store.sandboxes.get(id)?.timeout_held_s, 600);
    // A wake that fails leaves it halted, its timeout still held.
    await assert.rejects(m.resume(id), (e) => isForkdError(e, 'setup_required'));
    const row = store.sandboxes.get(id);
    assert.deepEqual([row?.tier, row?.expires_at, row?.timeout_held_s], ['halted', null, 600]);
  });
});
