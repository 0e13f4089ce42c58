/**
 * `forkd run` without a daemon: the image's boot snapshot (boot.ts) restored in a fresh
 * QEMU of this process, captured first when this size was never started. The snapshot's
 * row lives in this home's database, as a daemon's would, so a daemon started later sees
 * it; the fork's identity (entropy, clock, hostname, id) is pushed as for every fork.
 * `image build` without a daemon captures the same snapshot eagerly (`captureBootSnapshotHere`).
 */
import { readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Paths } from '../../config.js';
import { makeDir } from '../../util/make-dir.js';
import { Store } from '../../store/db.js';
import { run } from '../../util/exec.js';
import { onPath } from '../../util/on-path.js';
import { parseQemuVersion } from '../host.js';
import type { Limiter, Placement } from '../limits.js';
import { silentLog } from '../log.js';
import { newSandboxId, resolveResources, type Sandbox } from '../sandboxes/sandbox.js';
import { bootKey, ensureBootSnapshot, type BootKey, type BootSnapshot } from './boot.js';
import type { Prepared } from './boot-eager.js';
import { prepareChild, restoreChild } from './fork.js';
import { SnapshotRegistry } from './registry.js';
import { vmm } from '../vmm.js';
import { phase } from '../../util/phases.js';

/** What a restored run reports (`forkd run --verbose`). */
export interface Restored {
  sandbox: Sandbox;
  tag: string;
  captured: boolean;
  captureMs: number;
}

/**
 * A sandbox of `req.image` restored from its boot snapshot (network none, like an
 * in-process boot), in the cgroup of `placement`. Throws when there is none to be had; the
 * caller boots then.
 */
export async function restoreBootSnapshot(
  p: Paths,
  req: {
    image: string;
    memoryMiB: number;
    cpus: number;
    env: Record<string, string>;
    signal?: AbortSignal;
    placement: Placement;
  },
): Promise<Restored> {
  const boot = await bootHere(p, { ...req, limiter: req.placement.limiter });
  phase('local: boot snapshot found');
  const child = await prepareChild(p, boot.manifest, newSandboxId(), undefined, req.placement);
  const up = await restoreChild(child, { env: req.env, signal: req.signal });
  return {
    sandbox: { ...up, limiter: req.placement.limiter },
    tag: boot.manifest.tag,
    captured: boot.captured,
    captureMs: boot.captureMs,
  };
}

/** The boot snapshot of a start without a daemon (network none), found or captured now. */
async function bootHere(
  p: Paths,
  req: { image: string; memoryMiB: number; cpus: number; limiter?: Limiter },
  onProgress?: (message: string) => void,
): Promise<BootSnapshot & { key: BootKey }> {
  const qemu = await qemuVersionHere(p);
  phase('local: qemu version');
  const key = await bootKey(p, { ...req, network: 'none' }, qemu);
  const boot = await withRegistry(p, (registry) =>
    ensureBootSnapshot(
      { paths: p, registry, qemuVersion: qemu, limiter: req.limiter, onProgress },
      key,
    ),
  );
  return { ...boot, key };
}

/**
 * QEMU's version (part of the key). Asking it (`qemu --version`) costs each run 0.1–0.5 s on
 * a loaded host, so the answer is kept in the home's cache with the binary's identity
 * (path, inode, size, mtime): a QEMU upgraded or replaced is asked again.
 */
async function qemuVersionHere(p: Paths): Promise<string> {
  const bin = await onPath(vmm().binary);
  const st = bin && (await stat(bin).catch(() => undefined));
  const id = st && `${bin}:${st.ino}:${st.size}:${st.mtimeMs}`;
  const file = join(p.home, 'cache', 'qemu-version.json');
  const kept = await readFile(file, 'utf8')
    .then((t) => JSON.parse(t) as { id?: string; version?: string })
    .catch(() => undefined);
  if (id && kept?.id === id && typeof kept.version === 'string') return kept.version;
  const version = await run(vmm().binary, ['--version']).then(
    (r) => parseQemuVersion(r.stdout),
    () => 'unknown',
  );
  if (id && version !== 'unknown') {
    const tmp = `${file}.${process.pid}`;
    await makeDir(dirname(file))
      .then(() => writeFile(tmp, JSON.stringify({ id, version })))
      .then(() => rename(tmp, file))
      .catch(() => rm(tmp, { force: true })); // a cache: asked again next time
  }
  return version;
}

/**
 * `image build` without a daemon: the boot snapshot `forkd run` (no daemon) will restore,
 * at the default size, captured now in this process (boot-eager.ts).
 */
export async function captureBootSnapshotHere(
  p: Paths,
  image: string,
  onProgress?: (message: string) => void,
): Promise<Prepared> {
  const b = await bootHere(p, { image, ...resolveResources({}) }, onProgress);
  return { tag: b.manifest.tag, captured: b.captured, captureMs: b.captureMs, key: b.key };
}

/** This home's snapshot registry for one call (no daemon holds it: none runs). */
async function withRegistry<T>(
  p: Paths,
  fn: (registry: SnapshotRegistry) => Promise<T>,
): Promise<T> {
  const store = Store.open(p.db);
  try {
    const registry = new SnapshotRegistry({
      paths: p,
      store,
      log: silentLog,
      forkedFrom: () => [],
      poolState: async () => ({ size: 0, ready: 0, prewarm: false, memory_bytes: 0 }),
    });
    return await fn(registry);
  } finally {
    store.close();
  }
}
