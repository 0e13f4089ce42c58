/**
 * Sandbox rows written straight into a store, for tests of what the service makes of rows
 * it finds at start (reconcile, the tiers on disk) without booting anything.
 */
import { after, before } from 'node:test';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { paths, type Paths } from '../../src/config.js';
import { Store } from '../../src/store/db.js';
import type { SandboxRow } from '../../src/store/sandboxes.js';

/**
 * A home under /tmp with its sandboxes directory and an open store for the whole file
 * (`ready` gets them before the first test), closed and removed after the last.
 */
export function tempStore(prefix: string, ready: (p: Paths, store: Store) => void): void {
  let home: { p: Paths; store: Store } | undefined;
  before(async () => {
    const p = paths(await mkdtemp(join(tmpdir(), prefix)));
    await mkdir(p.sandboxes, { recursive: true });
    home = { p, store: Store.open(p.db) };
    ready(home.p, home.store);
  });
  after(async () => {
    home?.store.close();
    if (home) await rm(home.p.home, { recursive: true, force: true });
  });
}

type Insert = Parameters<Store['sandboxes']['insert']>[0];

/** A running busybox sandbox's row in `dir` (256 MiB, 1 cpu, no timeout), then `over`. */
export function insertRow(store: Store, id: string, dir: string, over: Partial<Insert> = {}) {
  return store.sandboxes.insert({
    ...{ id, state: 'running', image: 'busybox', snapshot: null, parent: null },
    ...{ memory_mib: 256, cpus: 1, labels: {}, env: {}, created_at: new Date().toISOString() },
    ...{ expires_at: null, pid: null, dir, reason: null },
    ...over,
  }) as SandboxRow;
}
