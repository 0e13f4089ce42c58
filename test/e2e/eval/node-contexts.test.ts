/**
 * Node code contexts end to end with real VMs (TCG): one snapshot of a Debian parent (the
 * nodejs test image scripts/setup.sh builds) whose `node` context declared let/const/function
 * at top level and drew Math.random before the capture, and one fork of it that every test
 * shares (Node starts slowly under TCG: the file starts it three times in all). The fork
 * answers from the inherited process and keeps state between evals; a fan-out branches it
 * into 3 children that see its state, answer their own variant, draw different Math.random
 * numbers and leave it unchanged; errors, streamed output, a timeout the context survives,
 * an interrupt, and a second context's cwd/env kept over a restart that clears its state.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { EvalEventT } from '../../../src/contract/contexts.js';
import { fanOutJson, mainJson } from '../../helpers/eval.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { linkTestImage, NODE_IMAGE, privateGuest } from '../../helpers/python-image.js';
import { caller, closeAndCheck, startServices, type TestServices } from '../../helpers/services.js';

let home: TestHome;
let s: TestServices;
let id: string;

const MARKER = 'declared before the snapshot';
const WARM = [
  'let x = 41;\nconst started = process.pid;\nfunction inc(n) { return n + 1; }',
  // Math.random drawn once, so its pool is in the snapshot: only a reseed tells forks apart.
  `var marker = ${JSON.stringify(MARKER)};\nMath.random()`,
];

before(async () => {
  home = await makeTestHome();
  await privateGuest(home);
  await linkTestImage(home, NODE_IMAGE);
  s = await startServices(home);
  await s.snapshots.create(
    { tag: 'js', image: NODE_IMAGE, memory_mib: 512, contexts: ['node'], eval: WARM },
    caller,
  );
  const r = await s.snapshots.fork({ snapshot: 'js', n: 1 }, caller);
  assert.deepEqual(r.failed, [], JSON.stringify(r.failed));
  id = r.sandboxes[0]!.id;
});

after(() => closeAndCheck(s, home));

const evalIn = (code: string, extra: { context?: string; timeout_ms?: number } = {}) =>
  s.services.contexts.eval(id, { code, context: 'node', ...extra });

test('a node fork inherits the context; top-level state is kept between evals', async () => {
  const a = await evalIn('[marker, inc(x), started === process.pid]');
  assert.deepEqual(mainJson(a), [MARKER, 42, true]);
  assert.equal(a.text, `[ '${MARKER}', 42, true ]`);
  assert.equal(mainJson(await evalIn('x = 7;\nconst y = x * 2;')), 7);
  assert.equal(mainJson(await evalIn('y + x')), 21);
  const contexts = await s.services.contexts.list(id);
  assert.deepEqual(
    contexts.map((c) => [c.name, c.language, c.alive]),
    [['node', 'node', true]],
  );
});

test('node fan-out: 3 variants in 3 children of one state, each its own Math.random', async () => {
  await evalIn('var shared = "set in the source"');
  const mine = mainJson(await evalIn('Math.random()'));
  const variants = [0, 1, 2].map(
    (i) => `var shared = "changed in ${i}";\n[${i}, marker, Math.random()]`,
  );
  const out = await s.services.contexts.evalFork(id, { variants, context: 'node' }, caller);
  assert.equal(out.results.length, 3);
  const values = fanOutJson(out) as Array<[number, string, number]>;
  assert.deepEqual(
    values.map((v) => v.slice(0, 2)),
    [0, 1, 2].map((i) => [i, MARKER]),
  );
  const draws = [mine, ...values.map((v) => v[2])];
  assert.equal(new Set(draws).size, 4, `the same Math.random numbers: ${draws.join(' ')}`);
  assert.equal(mainJson(await evalIn('shared')), 'set in the source');
  for (const r of out.results) assert.equal((await s.sandboxes.get(r.sandbox!)).state, 'stopped');
  await s.snapshots.remove(out.snapshot, { force: true }).catch(() => undefined);
});

test('node errors and streamed output', async () => {
  const err = await evalIn('function f() {\n  throw new TypeError("boom");\n}\nf()');
  assert.equal(err.error?.name, 'TypeError');
  assert.equal(err.error?.value, 'boom');
  assert.match(err.error?.traceback ?? '', /at f \(<cell>:2:9\)/);
  assert.doesNotMatch(err.error?.traceback ?? '', /node-runner|node:vm/);

  const events: EvalEventT[] = [];
  const stream = await s.services.contexts.evalStream(id, {
    context: 'node',
    code: 'console.log("a");\nnew Promise((r) => setTimeout(() => { console.error("b"); r(6 * 7); }, 300))',
  });
  for await (const ev of stream) events.push(ev);
  assert.deepEqual(
    events.map((e) => [e.type, 'text' in e ? e.text : null]),
    [
      ['stdout', 'a\n'],
      ['stderr', 'b\n'],
      ['result', null],
      ['end', null],
    ],
  );
});

test('a node timeout or interrupt stops the code, not the context; restart; own cwd/env', async () => {
  const looped = await evalIn('while (true) {}', { timeout_ms: 1500 });
  assert.equal(looped.error?.name, 'TimeoutError');
  assert.equal(mainJson(await evalIn('marker')), MARKER);

  const waiting = evalIn('new Promise(() => {})');
  await new Promise((r) => setTimeout(r, 1000));
  await s.services.contexts.interrupt(id, 'node');
  assert.equal((await waiting).error?.name, 'InterruptError');
  assert.equal(mainJson(await evalIn('inc(1)')), 2);

  const other = await s.services.contexts.create(id, {
    name: 'js2',
    language: 'node',
    cwd: '/tmp',
    env: { MY_VAR: 'v' },
  });
  assert.equal(other.language, 'node');
  const where = 'let z = 1;\n[typeof z, typeof marker, process.cwd(), process.env.MY_VAR]';
  assert.deepEqual(mainJson(await evalIn(where, { context: 'js2' })), [
    'number',
    'undefined',
    '/tmp',
    'v',
  ]);
  const restarted = await s.services.contexts.restart(id, 'js2');
  assert.equal(restarted.language, 'node');
  const after = '[typeof z, process.cwd(), process.env.MY_VAR]';
  assert.deepEqual(mainJson(await evalIn(after, { context: 'js2' })), ['undefined', '/tmp', 'v']);
  assert.equal(mainJson(await evalIn('marker')), MARKER, 'the other context lost its state');
  await s.sandboxes.kill(id);
});
