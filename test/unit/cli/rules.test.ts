/**
 * The CLI's copy of the contract's rules (src/cli/rules.ts) equals the contract
 * (src/contract/schemas.ts): every pattern and range the CLI checks flags against before it
 * sends anything, so a user is never refused by the CLI for what the daemon takes, nor
 * sent to the daemon with what it refuses.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as schemas from '../../../src/contract/schemas.js';
import { ENV_NAME, LABEL_KEY, LIMITS, NAME, SANDBOX_ID, USER } from '../../../src/cli/rules.js';

type Props = Record<string, Record<string, unknown>>;
const props = (schema: unknown): Props => (schema as { properties: Props }).properties;
/** A schema's own keywords, whatever TypeBox's type says. */
const kw = (s: unknown) => s as Record<string, unknown> & { patternProperties: Props };
const range = (s: Record<string, unknown> | undefined) => ({ min: s?.minimum, max: s?.maximum });
/** A Record schema's key pattern (TypeBox keeps it under patternProperties). */
const keyPattern = (s: unknown) =>
  Object.keys((s as { patternProperties: object }).patternProperties)[0];

test('ids, names, label and env keys, users: the same patterns', () => {
  assert.equal(SANDBOX_ID.source, kw(schemas.SandboxId).pattern);
  assert.equal(NAME.source, kw(schemas.ImageName).pattern);
  assert.equal(NAME.source, kw(schemas.SnapshotTag).pattern);
  assert.equal(LABEL_KEY.source, keyPattern(schemas.Labels));
  assert.equal(ENV_NAME.source, keyPattern(schemas.Env));
  assert.equal(USER.source, props(schemas.ExecRequest).user?.pattern);
});

test('counts, sizes and timeouts: the same ranges', () => {
  const create = props(schemas.CreateSandbox);
  assert.deepEqual(range(create.memory_mib), LIMITS.memoryMib);
  assert.deepEqual(range(create.cpus), LIMITS.cpus);
  assert.deepEqual(range(create.timeout_s), LIMITS.sandboxTimeoutS);
  assert.deepEqual(range(create.n), LIMITS.forkCount);
  assert.deepEqual(range(props(schemas.ExecRequest).timeout_ms), LIMITS.execTimeoutMs);
  assert.deepEqual(range(props(schemas.SetPool).size), LIMITS.poolSize);
  const snapshot = props(schemas.CreateSnapshot);
  assert.deepEqual(range(snapshot.memory_mib), LIMITS.memoryMib);
  assert.deepEqual(range(snapshot.wait_port), LIMITS.waitPort);
  assert.deepEqual(range(snapshot.wait_timeout_s), LIMITS.waitTimeoutS);
  assert.deepEqual(range(props(schemas.BranchRequest).fork), LIMITS.branchFork);
  const labels = kw(schemas.Labels);
  assert.equal(labels.maxProperties, LIMITS.labels.max);
  assert.equal(Object.values(labels.patternProperties)[0]?.maxLength, LIMITS.labels.valueLength);
  const env = kw(schemas.Env);
  assert.equal(env.maxProperties, LIMITS.env.max);
  assert.equal(Object.values(env.patternProperties)[0]?.maxLength, LIMITS.env.valueLength);
});
