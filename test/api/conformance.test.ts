/**
 * The conformance suite (test/helpers/conformance.ts) against the fake services that the
 * API, CLI and SDK tests run on: the fake answers as the real services do
 * (test/e2e/services/conformance.test.ts runs the same cases with real VMs).
 */
import { FakeServices, SEED } from '../helpers/fake-services.js';
import { conformance } from '../helpers/conformance.js';

const fake = new FakeServices();
fake.streamDelayMs = 0;

conformance('fake', () => ({
  services: fake.services,
  image: SEED.image,
  snapshot: SEED.snapshot,
}));
