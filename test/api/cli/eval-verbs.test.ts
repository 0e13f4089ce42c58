/**
 * `forkd eval` and `forkd context` as a user runs them, over the fake services (through
 * the SDK's eval, contexts and evalFork): the value printed, output streamed, a
 * traceback on stderr with exit 1, --json (the REST API's Execution), --fan-out from a file,
 * and the context verbs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Value } from 'typebox/value';
import { EvalForkResult, Execution } from '../../../src/contract/contexts.js';
import { cliOverFakes, out } from '../../helpers/fake-cli.js';
import { SEED } from '../../helpers/fake-services.js';

const { fake, forkd, json } = cliOverFakes('forkd-cli-eval-');

test('eval prints the value; print output streams; an exception exits 1 with its traceback', async () => {
  fake.reset();
  const r = await forkd('eval', SEED.sandbox, '6 * 7');
  assert.equal(r.code, 0, r.stderr.toString());
  assert.equal(out(r), '6 * 7\n');
  assert.equal(out(await forkd('eval', SEED.sandbox, 'print(hello)')), 'hello\n');
  const bad = await forkd('eval', SEED.sandbox, 'raise KeyError');
  assert.equal(bad.code, 1);
  assert.match(bad.stderr.toString(), /KeyError/);
  const x = await json<{ results: { data: Record<string, string> }[] }>('eval', SEED.sandbox, 'v');
  assert.equal(x.results[0]?.data['text/plain'], 'v');
  // --json prints what the REST API answers: the contract's snake_case fields, text included.
  assert.ok(Value.Check(Execution, x), JSON.stringify(x));
  assert.deepEqual(Object.keys(x), Object.keys(Execution.properties));
  assert.deepEqual(Object.keys(x.results[0] ?? {}), ['is_main_result', 'data']);
  const missing = await forkd('eval', SEED.sandbox, '1', '--context', 'nope');
  assert.equal(missing.code, 3, 'context_not_found exits like every not-found');
});

test('eval --fan-out runs one variant per child, from a JSON array or lines', async (t) => {
  fake.reset();
  const dir = await mkdtemp(join(tmpdir(), 'forkd-fanout-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'v.json'), JSON.stringify(['a', 'b']));
  await writeFile(join(dir, 'v.txt'), 'x\ny\n\nz\n');
  const r = await forkd('eval', SEED.sandbox, '--fan-out', join(dir, 'v.json'));
  assert.equal(r.code, 0, r.stderr.toString());
  assert.match(out(r), /^\[0\] sbx-[0-9a-f]{12}: a\n\[1\] sbx-[0-9a-f]{12}: b\n$/);
  const lines = await json<{ results: unknown[] }>(
    'eval',
    SEED.sandbox,
    '--fan-out',
    join(dir, 'v.txt'),
  );
  assert.equal(lines.results.length, 3);
  assert.ok(Value.Check(EvalForkResult, lines), JSON.stringify(lines));
  await writeFile(join(dir, 'bad.json'), '[1, 2]');
  assert.equal((await forkd('eval', SEED.sandbox, '--fan-out', join(dir, 'bad.json'))).code, 2);
});

test('context verbs: create with cwd and env, ls, restart, interrupt, rm', async () => {
  fake.reset();
  const made = await json<{ name: string; cwd: string }>(
    'context',
    'create',
    SEED.sandbox,
    'data',
    '--cwd',
    '/data',
    '-e',
    'A=1',
  );
  assert.deepEqual([made.name, made.cwd], ['data', '/data']);
  assert.match(
    out(await forkd('context', 'ls', SEED.sandbox)),
    /^NAME\s+LANGUAGE.*\n.*python.*\n.*data/s,
  );
  assert.equal((await forkd('context', 'restart', SEED.sandbox, 'data')).code, 0);
  assert.equal((await forkd('context', 'interrupt', SEED.sandbox, 'data')).code, 0);
  assert.equal(out(await forkd('context', 'rm', SEED.sandbox, 'data')), 'removed context data\n');
  assert.equal((await forkd('context', 'rm', SEED.sandbox, 'data')).code, 3);
  assert.equal((await forkd('context', 'create', SEED.sandbox, '--cwd', 'rel')).code, 2);
});

test('context create --language node makes a Node context named node', async () => {
  fake.reset();
  const made = await json<{ name: string; language: string }>(
    'context',
    'create',
    SEED.sandbox,
    '--language',
    'node',
  );
  assert.deepEqual([made.name, made.language], ['node', 'node']);
  assert.match(out(await forkd('context', 'ls', SEED.sandbox)), /\nnode\s+node\s/);
  const bad = await forkd('context', 'create', SEED.sandbox, '--language', 'ruby');
  assert.equal(bad.code, 2);
});
