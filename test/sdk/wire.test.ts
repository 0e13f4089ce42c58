/**
 * The SDK's hand-written types cannot drift from the REST contract: each wire-name table
 * in @forkd/sdk/wire must name exactly the properties of its schema in src/api/schemas.ts.
 * (Request bodies are checked against the schemas by the fake daemon in client.test.ts.)
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { TSchema } from 'typebox';
import {
  EXEC_RESULT,
  FILE_STAT,
  IMAGE,
  SANDBOX,
  VERSION_INFO,
  fromWire,
  toWire,
  type WireNames,
} from '@forkd/sdk/wire';
import * as schemas from '../../src/api/schemas.js';

function propertiesOf(schema: TSchema): string[] {
  return Object.keys((schema as { properties: Record<string, unknown> }).properties).sort();
}

const TABLES: [string, WireNames<object>, TSchema][] = [
  ['Sandbox', SANDBOX, schemas.Sandbox],
  ['ExecResult', EXEC_RESULT, schemas.ExecResult],
  ['FileStat', FILE_STAT, schemas.FileStat],
  ['Image', IMAGE, schemas.Image],
  ['Version', VERSION_INFO, schemas.Version],
];

for (const [name, table, schema] of TABLES) {
  test(`the SDK's ${name} fields are the schema's properties`, () => {
    assert.deepEqual(Object.values(table).sort(), propertiesOf(schema));
  });
}

test("a streaming exec's exit event carries the ExecResult fields the SDK reads", () => {
  const exit = (schemas.ExecEvent as unknown as { anyOf: TSchema[] }).anyOf.find(
    (s) => (s as { properties: { type: { const?: string } } }).properties.type.const === 'exit',
  );
  assert.ok(exit, 'ExecEvent has an exit variant');
  const fields = propertiesOf(exit).filter((f) => f !== 'type');
  for (const f of fields) assert.ok(Object.values(EXEC_RESULT).includes(f), f);
});

test('fromWire renames, drops unknown fields, keeps absent optional fields absent', () => {
  const info = fromWire(SANDBOX, {
    id: 'sbx-0123456789ab',
    memory_mib: 256,
    created_at: 'x',
    from_the_future: 1,
  });
  assert.deepEqual(info, { id: 'sbx-0123456789ab', memoryMib: 256, createdAt: 'x' });
  assert.deepEqual(toWire(SANDBOX, info), {
    id: 'sbx-0123456789ab',
    memory_mib: 256,
    created_at: 'x',
  });
});
