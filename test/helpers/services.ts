/**
 * The daemon's real services, in-process, over a test home: store and services as
 * `forkd daemon` wires them (src/services/index.ts), for end-to-end tests with real VMs that need no
 * HTTP. `close` kills every sandbox and pool VM and closes the store.
 */
import { Store } from '../../src/store/db.js';
import { buildServices, type ServiceOptions, type ServiceSet } from '../../src/services/index.js';
import type { ReconcileReport } from '../../src/services/sandboxes/reconcile.js';
import { assertNoLeftovers, type TestHome } from './home.js';

export interface TestServices extends ServiceSet {
  store: Store;
  /** What the start's reconcile did (re-adopted, buried, swept). */
  started: ReconcileReport;
}

export const caller = { principal: 'test' };

export async function startServices(
  home: TestHome,
  extra: Partial<ServiceOptions> = {},
): Promise<TestServices> {
  const store = Store.open(home.paths.db);
  const set = buildServices({
    paths: home.paths,
    store,
    qemuVersion: async () => 'test',
    ...extra,
  });
  const started = await set.start();
  return {
    ...set,
    store,
    started,
    close: async () => {
      await set.close();
      store.close();
    },
  };
}

/**
 * A test file's teardown: close the services (if they started), prove nothing was left
 * behind, and remove the test home whatever happened.
 */
export async function closeAndCheck(s: TestServices | undefined, home: TestHome): Promise<void> {
  try {
    await s?.close();
    await assertNoLeftovers(home);
  } finally {
    await home.cleanup();
  }
}

/** Run a shell command in a sandbox; stdout as text (throws on a non-zero exit). */
export async function sh(s: TestServices, id: string, script: string): Promise<string> {
  const r = await s.sandboxes.exec(id, { argv: ['sh', '-c', script] });
  const out = Buffer.from(r.stdout, 'base64').toString('utf8');
  if (r.exit_code !== 0) {
    throw new Error(`${script} → exit ${r.exit_code}: ${out}${Buffer.from(r.stderr, 'base64')}`);
  }
  return out;
}
