/**
 * The SDK's hand-written types cannot drift from the REST contract: each wire-name table
 * in @forkd/sdk/wire must name exactly the properties of its schema in src/contract/schemas.ts
 * (snapshots with their chain fields, branch results, lineage nodes and their edges), and in
 * src/contract/contexts.ts (an eval's Execution and its results, which `forkd eval --json` prints).
 * (Request bodies are checked against the schemas by the fake daemon in client.test.ts.)
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { TSchema } from 'typebox';
import {
  BRANCH_RESULT,
  EVAL_RESULT,
  EXEC_RESULT,
  EXECUTION,
  FILE_STAT,
  FORK_FAILURE,
  FORK_RESULT,
  IMAGE,
  LINEAGE_EDGE,
  LINEAGE_NODE,
  POOL_STATE,
  SANDBOX,
  SANDBOX_IDLE,
  SANDBOX_LIMITS,
  SANDBOX_USAGE,
  SNAPSHOT,
  SNAPSHOT_FILE,
  VERIFY_PROBLEM,
  VERIFY_RESULT,
  VERSION_INFO,
  fromWire,
  toWire,
  type WireNames,
} from '@forkd/sdk/wire';
import * as schemas from '../../../src/contract/schemas.js';
import * as evalSchemas from '../../../src/contract/contexts.js';

interface ObjectSchema {
  properties: Record<string, TSchema>;
}
interface ArraySchema {
  items: TSchema;
}

function propertiesOf(schema: TSchema): string[] {
  return Object.keys((schema as ObjectSchema).properties).sort();
}

/** The schema of property `key` of an object schema. */
const prop = (schema: TSchema, key: string): TSchema => (schema as ObjectSchema).properties[key]!;

/** The item schema of an array property. */
const items = (schema: TSchema, key: string): TSchema => (prop(schema, key) as ArraySchema).items;

/** One variant of a tagged union (ExecEvent, SnapshotEvent) by its `type`. */
function variant(union: TSchema, type: string): TSchema {
  const found = (union as unknown as { anyOf: TSchema[] }).anyOf.find(
    (s) => (s as { properties: { type: { const?: string } } }).properties.type.const === type,
  );
  assert.ok(found, `no "${type}" variant`);
  return found;
}

/** The non-null variant of a lineage node's `parent` union. */
function edgeOf(node: TSchema): TSchema {
  const union = prop(node, 'parent') as unknown as { anyOf: TSchema[] };
  const edge = union.anyOf.find((s) => (s as { type?: string }).type === 'object');
  assert.ok(edge, 'no object variant of LineageNode.parent');
  return edge;
}

const TABLES: [string, WireNames<object>, TSchema][] = [
  ['Sandbox', SANDBOX, schemas.Sandbox],
  ['Sandbox.limits', SANDBOX_LIMITS, prop(schemas.Sandbox, 'limits')],
  ['Sandbox.usage', SANDBOX_USAGE, prop(schemas.Sandbox, 'usage')],
  ['Sandbox.idle', SANDBOX_IDLE, prop(schemas.Sandbox, 'idle')],
  ['ExecResult', EXEC_RESULT, schemas.ExecResult],
  ['FileStat', FILE_STAT, schemas.FileStat],
  ['Image', IMAGE, schemas.Image],
  ['Version', VERSION_INFO, schemas.Version],
  ['Snapshot', SNAPSHOT, schemas.Snapshot],
  ['SnapshotFile', SNAPSHOT_FILE, schemas.SnapshotFile],
  ['Snapshot.pool', POOL_STATE, prop(schemas.Snapshot, 'pool')],
  ['PoolState', POOL_STATE, schemas.PoolState],
  ['VerifyResult', VERIFY_RESULT, schemas.VerifyResult],
  ['VerifyResult.problems[]', VERIFY_PROBLEM, items(schemas.VerifyResult, 'problems')],
  ['ForkResult', FORK_RESULT, schemas.ForkResult],
  ['ForkResult.failed[]', FORK_FAILURE, items(schemas.ForkResult, 'failed')],
  ['BranchResult', BRANCH_RESULT, schemas.BranchResult],
  ['Lineage.nodes[]', LINEAGE_NODE, items(schemas.Lineage, 'nodes')],
  ['LineageNode.parent', LINEAGE_EDGE, edgeOf(schemas.LineageNode)],
  ['Execution', EXECUTION, evalSchemas.Execution],
  ['EvalResult', EVAL_RESULT, evalSchemas.EvalResult],
];

for (const [name, table, schema] of TABLES) {
  test(`the SDK's ${name} fields are the schema's properties`, () => {
    assert.deepEqual(Object.values(table).sort(), propertiesOf(schema));
  });
}

test("a streaming exec's exit event carries the ExecResult fields the SDK reads", () => {
  const fields = propertiesOf(variant(schemas.ExecEvent, 'exit')).filter((f) => f !== 'type');
  for (const f of fields) assert.ok(Object.values(EXEC_RESULT).includes(f), f);
});

test("a streamed snapshot create's events carry the fields the SDK reads", () => {
  assert.deepEqual(propertiesOf(variant(schemas.SnapshotEvent, 'progress')), ['message', 'type']);
  assert.deepEqual(propertiesOf(variant(schemas.SnapshotEvent, 'done')), ['snapshot', 'type']);
  assert.deepEqual(propertiesOf(variant(schemas.SnapshotEvent, 'error')), ['error', 'type']);
  assert.equal(prop(variant(schemas.SnapshotEvent, 'done'), 'snapshot'), schemas.Snapshot);
  assert.equal(items(schemas.Snapshot, 'files'), schemas.SnapshotFile);
  assert.equal(items(schemas.ForkResult, 'sandboxes'), schemas.Sandbox);
});

test("a branch's result nests the schemas the SDK converts it with", () => {
  assert.equal(prop(schemas.BranchResult, 'snapshot'), schemas.Snapshot);
  assert.deepEqual(
    prop(schemas.BranchResult, 'children'),
    schemas.ForkResult,
    'an optional ForkResult',
  );
  assert.equal(items(schemas.Lineage, 'nodes'), schemas.LineageNode);
  const edge = prop(schemas.LineageNode, 'kind');
  assert.deepEqual(prop(edgeOf(schemas.LineageNode), 'kind'), edge, 'an edge names a node kind');
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
