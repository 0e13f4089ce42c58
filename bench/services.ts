/**
 * The daemon's real services, in-process, over a private bench home: what the snapshot
 * and branch benchmarks measure without HTTP in the way.
 */
import { Store } from '../src/store/db.js';
import { SandboxManager } from '../src/services/sandboxes/service.js';
import { SnapshotManager } from '../src/services/snapshots/service.js';
import { makeBenchHome } from './home.js';

export const caller = { principal: 'bench' };

/** Start store, sandbox and snapshot services on a temp home linking `images`. */
export async function startBenchServices(images: string[]) {
  const home = await makeBenchHome(images);
  const p = home.paths;
  try {
    const store = Store.open(p.db);
    const sandboxes = new SandboxManager({ paths: p, store, maxBooting: 8 });
    await sandboxes.start();
    const snapshots = new SnapshotManager({
      paths: p,
      store,
      sandboxes,
      qemuVersion: async () => 'bench',
      maxCreating: 4,
    });
    await snapshots.start();
    const close = async () => {
      try {
        await snapshots.pool.close();
        await sandboxes.killAll();
        store.close();
      } finally {
        await home.cleanup();
      }
    };
    return { p, store, sandboxes, snapshots, close };
  } catch (e) {
    await home.cleanup();
    throw e;
  }
}

export type BenchServices = Awaited<ReturnType<typeof startBenchServices>>;
