/** One version number across packages: root package, SDK package and the SDK's VERSION agree. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { VERSION } from '@forkd/sdk';

const readVersion = (p: string) =>
  (JSON.parse(readFileSync(p, 'utf8')) as { version: string }).version;

test('every package carries the same version', () => {
  assert.equal(readVersion('package.json'), VERSION);
  assert.equal(readVersion('packages/sdk/package.json'), VERSION);
});
