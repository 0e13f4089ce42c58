/**
 * The pack cache's start-up sweep: a push's work dir and an index temp file whose process
 * is gone (a daemon SIGKILLed mid-push) are removed; those of a live process, the index,
 * the blobs being resumed and the downloads are kept.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { paths } from '../../../src/config.js';
import { makeWork, packCache, sweepDeadWork } from '../../../src/services/packs/oci.js';

test('sweepDeadWork removes what dead processes left in the pack cache, nothing else', async () => {
  const home = await mkdtemp(join(tmpdir(), 'forkd-pack-work-'));
  try {
    const p = paths(home);
    const cache = packCache(p);
    const dead = spawnSync('true').pid!; // a pid that has exited
    const live = await makeWork(p);
    await mkdir(join(cache, `work-${dead}-0a0b0c0d`));
    await writeFile(join(cache, `work-${dead}-0a0b0c0d`, 'x.tar.zst'), 'half a layer');
    await writeFile(join(cache, `index.json.${dead}-01020304`), '{');
    await writeFile(join(cache, 'index.json'), '{}');
    await mkdir(join(cache, 'blobs'));
    await writeFile(join(cache, 'blobs', 'abc.partial'), 'resumable');
    const removed = await sweepDeadWork(p);
    assert.deepEqual(removed.sort(), [`index.json.${dead}-01020304`, `work-${dead}-0a0b0c0d`]);
    assert.deepEqual(
      (await readdir(cache)).sort(),
      ['blobs', 'index.json', live.slice(cache.length + 1)].sort(),
    );
    assert.deepEqual(await readdir(join(cache, 'blobs')), ['abc.partial']);
  } finally {
    await rm(home, { recursive: true, force: true });
  }
});
