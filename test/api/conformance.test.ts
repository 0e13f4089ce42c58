/**
 * The conformance suite (test/helpers/conformance.ts) against the fake services that the
 * API, CLI and SDK tests run on: the fake answers as the real services do
 * (test/e2e/services/conformance.test.ts runs the same cases with real VMs). The last test
 * prints the fake's methods no case called: only EXEMPT may remain, each with its reason.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeServices, SEED } from '../helpers/fake-services.js';
import { conformance } from '../helpers/conformance.js';
import { exercised, methodsOf } from '../helpers/conformance-kit.js';

const fake = new FakeServices();
fake.streamDelayMs = 0;
fake.contexts.delayMs = 0;

conformance('fake', () => ({
  services: fake.services,
  image: SEED.image,
  snapshot: SEED.snapshot,
}));

/** The fake's own helpers (FakeContexts' private members), not service methods. */
const HELPERS = ['contexts.reset', 'contexts.of', 'contexts.context', 'contexts.running'];

/** Fake methods without a conformance case, and why (docs in the case table). */
const EXEMPT: Record<string, string> = {
  'audit.record': 'write-only: nothing a user of the services reads back',
};

test('every fake service method has a conformance case, or a reason in EXEMPT', () => {
  const missing = methodsOf(fake.services).filter((m) => !exercised.has(m) && !HELPERS.includes(m));
  console.log(`fake methods without a conformance case: ${missing.join(', ') || 'none'}`);
  assert.deepEqual(missing, Object.keys(EXEMPT).sort());
});
