/**
 * What the shim tells containerd of a task's resources: the limits a bundle's
 * `linux.resources` asks become forkd's limits of the task's QEMU, and Stats answers in
 * cgroup v1's Metrics message with upstream's field numbers (memory = 4, its usage entry =
 * 33; cpu = 3), which `ctr task metrics` and CRI decode.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { readBundle } from '../../../src/shim/bundle.js';
import { cgroupMetrics } from '../../../src/shim/watch.js';

async function bundleWith(linux: object) {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-bundle-'));
  try {
    await writeFile(
      join(dir, 'config.json'),
      JSON.stringify({ process: { args: ['true'] }, linux }),
    );
    return await readBundle(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test("linux.resources' memory limit and CPU quota become the QEMU's limits", async () => {
  const b = await bundleWith({
    resources: { memory: { limit: 512 * 2 ** 20 }, cpu: { quota: 50_000, period: 100_000 } },
  });
  assert.deepEqual(b.limits, { memory: 512 * 2 ** 20, cpu: 0.5 });
  assert.equal((await bundleWith({ resources: { memory: { limit: 0 } } })).limits, undefined);
  assert.equal((await bundleWith({})).limits, undefined);
});

/** The fields of one protobuf message: field number → raw value (varint or bytes). */
function fields(bytes: Uint8Array): Map<number, number | Uint8Array> {
  const r = protobuf.Reader.create(bytes);
  const out = new Map<number, number | Uint8Array>();
  while (r.pos < r.len) {
    const tag = r.uint32();
    out.set(tag >>> 3, (tag & 7) === 2 ? r.bytes() : Number(r.uint64()));
  }
  return out;
}

test('Stats is io.containerd.cgroups.v1.Metrics with the fields at upstream numbers', () => {
  const any = cgroupMetrics(
    { memoryBytes: 90 * 2 ** 20, cpuSeconds: 1.5, throttledSeconds: 0, oomKills: 1 },
    256 * 2 ** 20,
  );
  assert.equal(any.type_url, 'io.containerd.cgroups.v1.Metrics');
  const metrics = fields(any.value);
  const usage = fields(fields(metrics.get(4) as Uint8Array).get(33) as Uint8Array);
  assert.equal(usage.get(2), 90 * 2 ** 20, 'memory.usage.usage');
  assert.equal(usage.get(1), 256 * 2 ** 20, 'memory.usage.limit');
  const cpu = fields(fields(metrics.get(3) as Uint8Array).get(1) as Uint8Array);
  assert.equal(cpu.get(1), 1.5e9, 'cpu.usage.total in ns');
  assert.equal(fields(metrics.get(9) as Uint8Array).get(3), 1, 'memory_oom_control.oom_kill');
});
