/**
 * The daemon's real services, in-process, over a private bench home: what the snapshot
 * and branch benchmarks measure without HTTP in the way.
 */
import { Store } from '../src/store/db.js';
import { buildServices, type ServiceOptions } from '../src/services/index.js';
import { makeBenchHome } from './home.js';

export const caller = { principal: 'bench' };

/** Start the store and the services on a temp home linking `images`. */
export async function startBenchServices(images: string[], extra: Partial<ServiceOptions> = {}) {
  const home = await makeBenchHome(images);
  const p = home.paths;
  try {
    const store = Store.open(p.db);
    const set = buildServices({
      paths: p,
      store,
      maxBooting: 8,
      maxCreating: 4,
      qemuVersion: async () => 'bench',
      ...extra,
    });
    await set.start();
    const close = async () => {
      try {
        await set.close();
        store.close();
      } finally {
        await home.cleanup();
      }
    };
    return { ...set, p, store, close };
  } catch (e) {
    await home.cleanup();
    throw e;
  }
}

export type BenchServices = Awaited<ReturnType<typeof startBenchServices>>;
