/**
 * Diff memory bookkeeping without VMs (src/services/snapshots/memory.ts): the files a page is
 * read through, the chain checks (missing parent, another parent memory), the sizes shown,
 * the eviction of unused caches, the start-up sweep of what a crash left.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { paths, type Paths } from '../../../src/config.js';
import type { SnapshotManifest } from '../../../src/services/snapshots/files.js';
import {
  evictMaterialized,
  memoryChainProblem,
  memoryDepth,
  memoryId,
  memoryLayers,
  memorySizes,
  sweepMemory,
  withoutDiff,
} from '../../../src/services/snapshots/memory.js';

let p: Paths;
before(async () => {
  p = paths(await mkdtemp(join(tmpdir(), 'forkd-memory-')));
});
after(async () => {
  await rm(p.home, { recursive: true, force: true });
});

const file = (name: string, sha256: string) => ({ name, size: 4096, allocated: 4096, sha256 });

/** Write a snapshot dir: a full memory, or a diff over `over`; `cached` adds its materialized file. */
async function snapshot(
  tag: string,
  over: SnapshotManifest | null,
  cached = false,
): Promise<SnapshotManifest> {
  const dir = join(p.snapshots, tag);
  await mkdir(dir, { recursive: true });
  const memory = over ? 'memory.diff' : 'memory';
  const m: SnapshotManifest = {
    format_version: over ? 2 : 1,
    tag,
    image: 'busybox',
    parent: over?.tag ?? null,
    source_sandbox: null,
    kernel: 'k',
    qemu: 'q',
    accel: 'tcg',
    memory_mib: 256,
    cpus: 1,
    created_at: new Date().toISOString(),
    labels: {},
    files: {
      memory: file(memory, `sha-${tag}`),
      vmstate: file('vmstate', 'v'),
      disk: file('disk.qcow2', 'd'),
    },
    ...(over ? { memory_diff: { parent: over.tag, parent_memory_id: memoryId(over) } } : {}),
  };
  await writeFile(join(dir, memory), 'x');
  if (cached) await writeFile(join(dir, 'memory'), 'full');
  await writeFile(join(dir, 'manifest.json'), JSON.stringify(m));
  return m;
}

test('a diff is read through its parents down to the nearest full or materialized memory', async () => {
  const base = await snapshot('base', null);
  const a = await snapshot('a', base);
  const b = await snapshot('b', a, true);
  const c = await snapshot('c', b);
  const d = await snapshot('d', c);
  const dir = (t: string, f: string) => join(p.snapshots, t, f);
  assert.deepEqual(await memoryLayers(p, a), [dir('a', 'memory.diff'), dir('base', 'memory')]);
  assert.deepEqual(await memoryLayers(p, d), [
    dir('d', 'memory.diff'),
    dir('c', 'memory.diff'),
    dir('b', 'memory'), // b's cache ends the walk
  ]);
  assert.equal(await memoryDepth(p, d), 4);
  assert.equal(await memoryDepth(p, base), 0);
  const all = new Map([base, a, b, c, d].map((m) => [m.tag, m]));
  const sizes = await memorySizes(p, b, all);
  assert.deepEqual(
    { kind: sizes.kind, parent: sizes.parent, depth: sizes.depth },
    { kind: 'diff', parent: 'a', depth: 2 },
  );
  assert.ok(sizes.materialized_bytes > 0);
  assert.equal((await memorySizes(p, c, all)).materialized_bytes, 0);
  assert.equal(await memoryChainProblem(p, d), null);
});

test('the chain check names a missing parent memory, a missing manifest, another memory', async () => {
  const base = await snapshot('base2', null);
  const a = await snapshot('a2', base);
  const b = await snapshot('b2', a);
  await rm(join(p.snapshots, 'a2', 'memory.diff'));
  assert.match(
    (await memoryChainProblem(p, b))?.problem ?? '',
    /missing parent memory .*a2\/memory\.diff \(snapshot "a2", which the memory of "b2" is a diff over\)/,
  );
  await writeFile(join(p.snapshots, 'a2', 'memory.diff'), 'x');
  await writeFile(
    join(p.snapshots, 'base2', 'manifest.json'),
    JSON.stringify({ ...base, files: { ...base.files, memory: file('memory', 'other') } }),
  );
  assert.match((await memoryChainProblem(p, b))?.problem ?? '', /"base2" is not the one/);
  await rm(join(p.snapshots, 'base2'), { recursive: true });
  assert.match((await memoryChainProblem(p, a))?.problem ?? '', /"base2".*has no manifest/);
});

test('a compacted memory keeps its memory id, so the diffs over it still hold', async () => {
  const base = await snapshot('base3', null);
  const a = await snapshot('a3', base);
  const full = withoutDiff(a);
  assert.equal(full.memory_diff, undefined);
  assert.equal(memoryId(full), memoryId(a));
});

test('eviction removes unused caches, least recently used first, never one in use', async () => {
  const base = await snapshot('base4', null);
  const x = await snapshot('x4', base, true);
  const y = await snapshot('y4', base, true);
  const z = await snapshot('z4', base, true);
  const all = new Map([base, x, y, z].map((m) => [m.tag, m]));
  const evicted = await evictMaterialized(p, all, (t) => t === 'x4', 0);
  assert.deepEqual(evicted.sort(), ['y4', 'z4']);
  assert.ok(existsSync(join(p.snapshots, 'x4', 'memory')), 'a cache in use was evicted');
  assert.ok(existsSync(join(p.snapshots, 'base4', 'memory')), 'a full memory was evicted');
  assert.deepEqual(await evictMaterialized(p, all, () => false, 1 << 30), []);
});

test('start-up sweep: half-built caches and the diff a crash mid-compaction left', async () => {
  const base = await snapshot('base5', null);
  await snapshot('a5', base);
  const dir = join(p.snapshots, 'base5');
  await writeFile(join(dir, '.memory.tmp-1-ab'), 'half');
  await writeFile(join(dir, 'memory.diff'), 'stale'); // base5's manifest says full
  await sweepMemory(p);
  assert.ok(!existsSync(join(dir, '.memory.tmp-1-ab')));
  assert.ok(!existsSync(join(dir, 'memory.diff')));
  assert.ok(existsSync(join(p.snapshots, 'a5', 'memory.diff')), "a diff snapshot's own diff went");
});
