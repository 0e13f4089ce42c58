/**
 * Node code contexts end to end with real VMs (TCG): one snapshot of a Debian parent (the
 * nodejs test image) whose `node` context declared let/const/function at top level before
 * the capture. Its two forks answer from the inherited process, keep state between evals,
 * are isolated and draw different Math.random numbers; errors, streamed output, a timeout
 * the context survives, an interrupt, a restart and a second context's cwd/env in one child.
 *
 * Opt-in (FORKD_TEST_NODE=1): building the nodejs image and starting Node under TCG adds
 * some 7 minutes, which the default suite's 25-minute budget has no room for yet.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { EvalEventT, ExecutionT } from '../../../src/contract/eval.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { linkTestImage, NODE_IMAGE, privateGuest } from '../../helpers/python-image.js';
import { caller, closeAndCheck, startServices, type TestServices } from '../../helpers/services.js';

const OFF = process.env.FORKD_TEST_NODE !== '1';
const nodeTest = OFF ? test.skip : test;

let home: TestHome;
let s: TestServices;
let ids: string[] = [];

const WARM = [
  'let x = 41;\nconst started = process.pid;\nfunction inc(n) { return n + 1; }',
  'var marker = "declared before the snapshot"',
];

before(async () => {
  if (OFF) return;
  home = await makeTestHome();
  await privateGuest(home);
  await linkTestImage(home, NODE_IMAGE);
  s = await startServices(home);
  await s.snapshots.create(
    { tag: 'js', image: NODE_IMAGE, memory_mib: 512, contexts: ['node'], eval: WARM },
    caller,
  );
  const r = await s.snapshots.fork({ snapshot: 'js', n: 2 }, caller);
  assert.deepEqual(r.failed, [], JSON.stringify(r.failed));
  ids = r.sandboxes.map((sb) => sb.id);
});

after(() => (OFF ? undefined : closeAndCheck(s, home)));

const evalIn = (id: string, code: string, extra: { context?: string; timeout_ms?: number } = {}) =>
  s.services.contexts.eval(id, { code, context: 'node', ...extra });

function json(x: ExecutionT): unknown {
  assert.equal(x.error, null, x.error?.traceback);
  return x.results.find((r) => r.is_main_result)?.data['application/json'];
}

nodeTest(
  'node forks inherit the context: top-level state kept between evals, isolated',
  async () => {
    const answers = await Promise.all(
      ids.map((id) => evalIn(id, '[marker, inc(x), started === process.pid]')),
    );
    for (const a of answers) {
      assert.deepEqual(json(a), ['declared before the snapshot', 42, true]);
      assert.equal(a.text, "[ 'declared before the snapshot', 42, true ]");
    }
    assert.equal(json(await evalIn(ids[0]!, 'x = 7;\nconst y = x * 2;')), 7);
    assert.equal(json(await evalIn(ids[0]!, 'y + x')), 21);
    assert.equal(json(await evalIn(ids[1]!, 'x')), 41);
    const rand = await Promise.all(ids.map((id) => evalIn(id, 'Math.random()')));
    const values = rand.map((a) => json(a));
    assert.equal(new Set(values).size, ids.length, `the same random numbers: ${values.join(' ')}`);
    const contexts = await s.services.contexts.list(ids[1]!);
    assert.deepEqual(
      contexts.map((c) => [c.name, c.language, c.alive]),
      [['node', 'node', true]],
    );
  },
);

nodeTest('node errors and streamed output', async () => {
  const id = ids[0]!;
  const err = await evalIn(id, 'function f() {\n  throw new TypeError("boom");\n}\nf()');
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

nodeTest(
  'a node timeout or interrupt stops the code, not the context; restart; own cwd/env',
  async () => {
    const id = ids[1]!;
    const looped = await evalIn(id, 'while (true) {}', { timeout_ms: 1500 });
    assert.equal(looped.error?.name, 'TimeoutError');
    assert.equal(json(await evalIn(id, 'inc(x)')), 42);

    const waiting = evalIn(id, 'new Promise(() => {})');
    await new Promise((r) => setTimeout(r, 1500));
    await s.services.contexts.interrupt(id, 'node');
    assert.equal((await waiting).error?.name, 'InterruptError');

    const restarted = await s.services.contexts.restart(id, 'node');
    assert.equal(restarted.language, 'node');
    assert.equal((await evalIn(id, 'x')).error?.name, 'ReferenceError');

    const other = await s.services.contexts.create(id, {
      name: 'js2',
      language: 'node',
      cwd: '/tmp',
      env: { MY_VAR: 'v' },
    });
    assert.equal(other.language, 'node');
    const where = await evalIn(id, '[process.cwd(), process.env.MY_VAR]', { context: 'js2' });
    assert.deepEqual(json(where), ['/tmp', 'v']);
    await Promise.all(ids.map((i) => s.sandboxes.kill(i)));
  },
);
