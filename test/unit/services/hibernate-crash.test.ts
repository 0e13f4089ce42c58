/**
 * The crash window of a hibernation (src/services/sandboxes/hibernate.ts, reconcile.ts),
 * without VMs: the tier is recorded before QEMU ends, so a daemon that died between ending
 * QEMU and putting the capture in place leaves a `hibernated` row with a staged capture
 * (whole, or half renamed). The next start puts it in place and holds the sandbox
 * hibernated, not dead; a hibernation cut short before the record leaves a running row
 * whose staged files are debris.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../../src/config.js';
import type { Limiter } from '../../../src/services/limits.js';
import { hibernationFiles } from '../../../src/services/sandboxes/hibernate.js';
import { silentLog } from '../../../src/services/log.js';
import { reconcile } from '../../../src/services/sandboxes/reconcile.js';
import type { Store } from '../../../src/store/db.js';
import { insertRow, tempStore } from '../../helpers/rows.js';
import type { SandboxRow } from '../../../src/store/sandboxes.js';
import { wireVmm } from '../../../src/services/vmm-driver.js';

wireVmm(); // reconcile and the registry read disk chains and pids through the VMM

let p: Paths;
let store: Store;
tempStore('forkd-hibernate-crash-', (home, s) => {
  p = home;
  store = s;
});

/** A running row in `tier` whose QEMU is gone (no such pid, no pid file). */
async function sandbox(id: string, tier: SandboxRow['tier']): Promise<string> {
  const dir = join(p.sandboxes, id);
  await mkdir(hibernationFiles(dir).dir, { recursive: true });
  insertRow(store, id, dir);
  // The QEMU it had: ended, its pid not reused (the kernel's pid_max is below it).
  store.sandboxes.update(id, { tier, pid: 1 << 23 });
  return dir;
}

/** Write some of a capture's files, staged (`.new`) or in place. */
async function write(dir: string, names: string[]): Promise<void> {
  const f = hibernationFiles(dir);
  const full: Record<string, string> = {
    memory: f.memory,
    vmstate: f.vmstate,
    image: f.image,
  };
  for (const n of names) {
    const [key, staged] = n.split('.') as [string, string | undefined];
    const path = `${full[key]}${staged ? '.new' : ''}`;
    await writeFile(path, n === 'image.new' ? JSON.stringify({ disk: 'new' }) : n);
  }
}

const limiter = { sweep: async () => [], remove: async () => undefined } as unknown as Limiter;

async function restart() {
  const held: string[] = [];
  const report = await reconcile({
    paths: p,
    rows: store.sandboxes,
    log: silentLog,
    pollMs: 1000,
    bootTimeoutMs: 1000,
    limiter,
    adopt: () => assert.fail('no QEMU runs: nothing to re-adopt'),
    adoptHibernated: (row) => void held.push(row.id),
  });
  return { report, held };
}

test('a crash after the tier was recorded: the staged capture is put in place, held hibernated', async () => {
  // Whole staging (QEMU ended, nothing renamed yet), over an earlier hibernation's files.
  const whole = await sandbox('sbx-00000000c001', 'hibernated');
  await write(whole, ['memory', 'vmstate', 'image', 'memory.new', 'vmstate.new', 'image.new']);
  // Half renamed: the memory took its name, the rest did not.
  const half = await sandbox('sbx-00000000c002', 'hibernated');
  await write(half, ['memory', 'vmstate.new', 'image.new']);
  // Cut short before the record: its QEMU (still stopped, captured) would have been found;
  // without one the row is dead as before, and its staged files go with its directory.
  const early = await sandbox('sbx-00000000c003', 'running');
  await write(early, ['memory.new', 'vmstate.new']);

  const { report, held } = await restart();
  assert.deepEqual(held.sort(), ['sbx-00000000c001', 'sbx-00000000c002']);
  assert.deepEqual(report.dead, ['sbx-00000000c003']);
  for (const dir of [whole, half]) {
    const f = hibernationFiles(dir);
    assert.deepEqual(
      [f.memory, f.vmstate, f.image].map((x) => [existsSync(x), existsSync(`${x}.new`)]),
      [
        [true, false],
        [true, false],
        [true, false],
      ],
      `${dir}: every file in place, nothing staged left`,
    );
    assert.deepEqual(JSON.parse(await readFile(f.image, 'utf8')), { disk: 'new' });
  }
  assert.equal(
    await readFile(hibernationFiles(whole).memory, 'utf8'),
    'memory.new',
    'the new capture replaced the earlier one',
  );
  assert.equal(store.sandboxes.get('sbx-00000000c001')?.tier, 'hibernated');
  assert.equal(store.sandboxes.get('sbx-00000000c001')?.pid, null, 'no pid of an ended QEMU');
  assert.equal(store.sandboxes.get('sbx-00000000c003')?.state, 'dead');
  assert.equal(existsSync(early), false);
});

test('a hibernated row with no capture at all is dead, its reason says so', async () => {
  await sandbox('sbx-00000000c004', 'hibernated');
  const { report } = await restart();
  assert.deepEqual(report.dead, ['sbx-00000000c004']);
  assert.match(store.sandboxes.get('sbx-00000000c004')?.reason ?? '', /capture is missing/);
});
