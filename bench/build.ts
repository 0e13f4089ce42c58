/**
 * Build benchmark (issue 36, docs/build.md "Measured"): a Python template — the image
 * forkd-test-python (numpy installed), a COPY of a script, a RUN that byte-compiles it, a
 * warm interpreter that imports numpy started with `# forkd:start` — built under the
 * daemon's real services, in-process: the first build, a rebuild with nothing changed, a
 * rebuild with only the last step edited. Prints each build's wall time and each step's
 * status, time and the disk its snapshot takes.
 * Usage: node dist/bench/build.js
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BuildResult } from '../src/services/contracts.js';
import { caller, startBenchServices } from './services.js';

const IMAGE = 'forkd-test-python';
const SERVER = `import numpy, os, time
open('/tmp/ready', 'w').write(str(numpy.ones(3).sum()))
while True: time.sleep(3600)
`;

function dockerfile(marker: string): string {
  return [
    `FROM ${IMAGE}`,
    'WORKDIR /app',
    'COPY srv.py ./',
    'RUN python3 -m py_compile srv.py',
    `# forkd:start --wait-file=/tmp/ready --timeout=600 python3 srv.py ${marker}`,
  ].join('\n');
}

function show(name: string, r: BuildResult): void {
  console.log(`${name}: ${(r.duration_ms / 1000).toFixed(1)} s`);
  for (const s of r.steps) {
    const disk = s.disk_bytes ? ` ${(s.disk_bytes / 1048576).toFixed(1)} MiB` : '';
    console.log(
      `  step ${s.step} ${s.status.padEnd(6)} ${(s.duration_ms / 1000).toFixed(1)} s${disk}  ${s.instruction}`,
    );
  }
}

async function main(): Promise<void> {
  const set = await startBenchServices([IMAGE], { defaultPool: 0 });
  const dir = await mkdtemp(join(tmpdir(), 'forkd-bench-build-'));
  try {
    await writeFile(join(dir, 'srv.py'), SERVER);
    const run = async (marker: string) =>
      set.builds.buildDir(
        { dockerfile: dockerfile(marker), context: dir, tag: 'pytpl', memory_mib: 512 },
        caller,
      );
    const first = await run('a');
    show('first build', first);
    const again = await run('a');
    show('no-change rebuild', again);
    console.log(
      `  rebuild / first: ${((100 * again.duration_ms) / first.duration_ms).toFixed(1)} %`,
    );
    show('last-step edit', await run('b'));
  } finally {
    await rm(dir, { recursive: true, force: true });
    await set.close();
  }
}

await main();
