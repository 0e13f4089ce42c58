/**
 * Image pull benchmark: a ~100 MB image of 4 layers (random, so incompressible, plus a
 * tree of small files) built here, pushed to Debian's docker-registry on loopback, then
 * pulled: cold (empty layer cache), warm (every layer cached: only apply + mkfs), and
 * `forkd from-image` end to end through a daemon (pull + boot + capture).
 * Usage: node dist/bench/image-pull.js
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RegistryClient } from '../src/drivers/registry/index.js';
import { pullImage } from '../src/services/images/index.js';
import { forkd } from '../test/helpers/cli.js';
import { startDaemon } from '../test/helpers/daemon-process.js';
import { layerFromDir, ociImage, push, startRegistry } from '../test/e2e/images/registry.js';
import { makeBenchHome } from './home.js';

const MiB = 1024 * 1024;

async function layer(scratch: string, i: number, bytes: number, smallFiles: number) {
  const dir = join(scratch, `d${i}`);
  await mkdir(join(dir, `data${i}`), { recursive: true });
  await writeFile(join(dir, `data${i}`, 'blob.bin'), randomBytes(bytes));
  for (let f = 0; f < smallFiles; f++)
    await writeFile(join(dir, `data${i}`, `f${f}.txt`), `file ${f}\n`.repeat(20));
  return layerFromDir(dir, join(scratch, `L${i}`), 'gzip');
}

async function time<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const v = await fn();
  return [v, (performance.now() - t0) / 1000];
}

async function main(): Promise<void> {
  const scratch = await mkdtemp(join(tmpdir(), 'forkd-bench-pull-'));
  const reg = await startRegistry();
  const home = await makeBenchHome();
  try {
    const layers = [];
    const busybox = join(scratch, 'd0');
    await mkdir(join(busybox, 'bin'), { recursive: true });
    const { copyFile, symlink } = await import('node:fs/promises');
    await copyFile('/bin/busybox', join(busybox, 'bin/busybox'));
    await symlink('busybox', join(busybox, 'bin/sh'));
    layers.push(await layerFromDir(busybox, join(scratch, 'L0'), 'gzip'));
    for (let i = 1; i <= 4; i++) layers.push(await layer(scratch, i, 25 * MiB, 500));
    const img = ociImage(layers, { Env: ['PATH=/bin'], Cmd: ['/bin/sh'] });
    await push(new RegistryClient(reg.host), 'bench/app', '1', img, scratch);
    const bytes = layers.reduce((a, l) => a + l.size, 0);
    const ref = `${reg.host}/bench/app:1`;
    console.log(
      `image: ${layers.length} layers, ${(bytes / MiB).toFixed(1)} MiB compressed, ${2000} small files`,
    );
    const [, cold] = await time(() => pullImage(home.paths, { reference: ref, name: 'cold' }));
    console.log(
      `pull + build, cold cache:  ${cold.toFixed(2)} s  (${(bytes / MiB).toFixed(1)} MiB downloaded, ${(bytes / MiB / cold).toFixed(1)} MiB/s overall)`,
    );
    const [, warm] = await time(() => pullImage(home.paths, { reference: ref, name: 'warm' }));
    console.log(
      `pull + build, warm cache:  ${warm.toFixed(2)} s  (0 MiB downloaded: manifest + config only)`,
    );
    const [, same] = await time(() => pullImage(home.paths, { reference: ref, name: 'warm' }));
    console.log(`pull, same digest again:   ${same.toFixed(3)} s  (image answered as it is)`);
    const daemon = await startDaemon({ ...home, cleanup: home.cleanup });
    try {
      const env = { ...home.env, FORKD_URL: daemon.url };
      const [r, e2e] = await time(() =>
        forkd(['from-image', ref, '--name', 'fi', '--tag', 'fi', '--json'], { env }),
      );
      if (r.code !== 0) throw new Error(r.stderr);
      console.log(
        `from-image end to end:     ${e2e.toFixed(2)} s  (layers cached; build + boot + capture)`,
      );
      const [r2, again] = await time(() =>
        forkd(['from-image', ref, '--name', 'fi', '--tag', 'fi', '--json'], { env }),
      );
      if (r2.code !== 0) throw new Error(r2.stderr);
      console.log(
        `from-image, nothing new:   ${again.toFixed(2)} s  (manifest check; image and snapshot reused)`,
      );
      await forkd(['rmi', 'fi'], { env });
    } finally {
      await daemon.stop();
    }
  } finally {
    await reg.stop();
    await home.cleanup();
    await rm(scratch, { recursive: true, force: true });
  }
}

await main();
