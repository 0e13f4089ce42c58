/**
 * The wake of a halted sandbox is a cold boot, so it passes the daemon's boot gate
 * (`--max-booting`) as a boot from an image does (src/services/sandboxes/halt.ts, gate.ts):
 * past the cap it is refused at once with `capacity` and stays halted. Without VMs: the
 * halted rows are held from their records at start, and a wake that gets through the gate
 * fails for want of a guest kernel in this home (setup_required), which is enough to see
 * who held the slot.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { paths, type Paths } from '../../../src/config.js';
import { isForkdError } from '../../../src/errors.js';
import type { Limiter } from '../../../src/services/limits.js';
import { haltFile, type HaltImage } from '../../../src/services/sandboxes/halt.js';
import { SandboxManager } from '../../../src/services/sandboxes/service.js';
import { Store } from '../../../src/store/db.js';
import { wireVmm } from '../../../src/services/vmm-driver.js';

wireVmm(); // the start's reconcile reads pid files through the VMM

let p: Paths;
let store: Store;
let next = 0;
before(async () => {
  p = paths(await mkdtemp(join(tmpdir(), 'forkd-halt-gate-')));
  await mkdir(p.sandboxes, { recursive: true });
  store = Store.open(p.db);
});
after(async () => {
  store.close();
  await rm(p.home, { recursive: true, force: true });
});

/** A halted sandbox as a halt leaves it: its row and its record, no QEMU. */
async function halted(): Promise<string> {
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
  store.sandboxes.insert({
    id,
    state: 'running',
    image: 'busybox',
    snapshot: null,
    parent: null,
    memory_mib: 256,
    cpus: 1,
    labels: {},
    env: {},
    created_at: new Date().toISOString(),
    expires_at: null,
    pid: null,
    dir,
    reason: null,
  });
  store.sandboxes.update(id, { tier: 'halted' });
  return id;
}

const limiter = {
  sweep: async () => [],
  remove: async () => undefined,
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
