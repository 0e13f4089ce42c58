/**
 * The conformance suite (test/helpers/conformance.ts) against the real services with real
 * VMs under TCG: the behaviour the fake services (test/api/conformance.test.ts) must match.
 */
import { after, before } from 'node:test';
import { conformance } from '../../helpers/conformance.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { caller, closeAndCheck, startServices, type TestServices } from '../../helpers/services.js';

let home: TestHome;
let s: TestServices | undefined;

before(async () => {
  home = await makeTestHome();
  s = await startServices(home);
  await s.snapshots.create({ tag: 'conf', warm: ['echo warm > /tmp/w'] }, caller);
});

after(() => closeAndCheck(s, home));

conformance('real', () => ({
  services: (s as TestServices).services,
  image: 'busybox',
  snapshot: 'conf',
}));
