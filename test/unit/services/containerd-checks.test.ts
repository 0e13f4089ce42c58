/**
 * The doctor's containerd checks (services/containerd-checks.ts): the shim found on PATH,
 * and containerd's config naming the forkd runtime with its pod annotations.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkRuntimeConfig, checkShim } from '../../../src/services/containerd-checks.js';

test('the shim on PATH passes; none is a warn saying how to install it', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-doctor-'));
  try {
    assert.equal((await checkShim({ PATH: dir })).status, 'warn');
    assert.match((await checkShim({ PATH: dir })).fix ?? '', /install\.sh/);
    await writeFile(join(dir, 'containerd-shim-forkd-v2'), '#!/bin/sh\n');
    await chmod(join(dir, 'containerd-shim-forkd-v2'), 0o755);
    const ok = await checkShim({ PATH: `/nonexistent:${dir}` });
    assert.deepEqual(ok, {
      status: 'pass',
      summary: `containerd-shim-forkd-v2 at ${dir}/containerd-shim-forkd-v2`,
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("containerd's config: missing, without the runtime, without annotations, complete", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-doctor-'));
  const config = join(dir, 'config.toml');
  const env = { FORKD_CONTAINERD_CONFIG: config };
  try {
    assert.match((await checkRuntimeConfig(env)).summary, /no containerd config at/);
    await writeFile(config, 'version = 2\n');
    assert.match((await checkRuntimeConfig(env)).summary, /does not name the forkd runtime/);
    const table =
      '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.forkd]\n  runtime_type = "io.containerd.forkd.v2"\n';
    await writeFile(config, `version = 2\n${table}`);
    assert.match(
      (await checkRuntimeConfig(env)).summary,
      /passes no forkd\.dev\/\* pod annotations/,
    );
    await writeFile(config, `version = 2\n${table}  pod_annotations = ["forkd.dev/*"]\n`);
    assert.equal((await checkRuntimeConfig(env)).status, 'pass');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
