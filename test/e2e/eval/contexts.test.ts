/**
 * Code contexts end to end with real VMs (TCG): one snapshot of a Debian parent whose
 * Python context imported numpy and matplotlib and set variables, with an on-fork hook.
 * Its 10 forks answer from the inherited interpreter (no re-import), are isolated from each
 * other, are reseeded, ran the hook; 3 of them stay for the rest: rich results, tracebacks,
 * timeouts, interrupts, restarts and per-context cwd/env in one child; fan-out of 5
 * variants from one call.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { EvalEventT } from '../../../src/contract/contexts.js';
import { isForkdError } from '../../../src/errors.js';
import { fanOutJson, mainJson } from '../../helpers/eval.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { linkTestImage, PYTHON_IMAGE, privateGuest } from '../../helpers/python-image.js';
import {
  caller,
  closeAndCheck,
  sh,
  startServices,
  type TestServices,
} from '../../helpers/services.js';

let home: TestHome;
let s: TestServices;
let ids: string[] = [];
/** The check is made in 10 forks; the tests after the first keep 3 of them. */
const FORKS = 10;
const KEPT = 3;

const WARM = [
  'import time, random, numpy, matplotlib\nmatplotlib.use("Agg")\nimport matplotlib.pyplot as plt',
  'numpy._forkd_marker = "imported before the snapshot"\nx = 42',
];

before(async () => {
  home = await makeTestHome();
  await privateGuest(home);
  await linkTestImage(home, PYTHON_IMAGE);
  s = await startServices(home);
  await s.snapshots.create(
    {
      tag: 'py',
      image: PYTHON_IMAGE,
      memory_mib: 512,
      contexts: ['python'],
      eval: WARM,
      on_fork: ['echo "hooked $(cat /run/forkd/sandbox-id)" > /tmp/on-fork.txt'],
    },
    caller,
  );
  const r = await s.snapshots.fork({ snapshot: 'py', n: FORKS }, caller);
  assert.deepEqual(r.failed, [], JSON.stringify(r.failed));
  ids = r.sandboxes.map((sb) => sb.id);
});

after(() => closeAndCheck(s, home));

const evalIn = (id: string, code: string, extra: { context?: string; timeout_ms?: number } = {}) =>
  s.services.contexts.eval(id, { code, ...extra });

test('10 forks answer from the inherited interpreter: no re-import, variables kept, isolated', async () => {
  try {
    const answers = await Promise.all(
      ids.map((id) => evalIn(id, 'numpy._forkd_marker, x, float(numpy.zeros(5).sum())')),
    );
    for (const a of answers) {
      assert.deepEqual(mainJson(a), ['imported before the snapshot', 42, 0]);
    }
    assert.deepEqual(mainJson(await evalIn(ids[0]!, 'x = 7\nx')), 7);
    const others = await Promise.all(ids.slice(1).map((id) => evalIn(id, 'x')));
    assert.deepEqual(others.map(mainJson), Array<number>(FORKS - 1).fill(42));
    const rand = await Promise.all(
      ids.map((id) => evalIn(id, 'numpy.random.rand(), random.random()')),
    );
    const values = rand.map((a) => JSON.stringify(mainJson(a)));
    assert.equal(new Set(values).size, FORKS, `the same random numbers: ${values.join(' ')}`);
    const hooked = await Promise.all(ids.map((id) => sh(s, id, 'cat /tmp/on-fork.txt')));
    assert.deepEqual(
      hooked,
      ids.map((id) => `hooked ${id}\n`),
    );
    const contexts = await s.services.contexts.list(ids[1]!);
    assert.deepEqual(
      contexts.map((c) => [c.name, c.language, c.alive]),
      [['python', 'python', true]],
    );
  } finally {
    await Promise.all(ids.splice(KEPT).map((id) => s.sandboxes.kill(id)));
  }
});

test('rich results, tracebacks and streamed output', async () => {
  const id = ids[0]!;
  const plot = await evalIn(id, 'plt.plot([1, 3, 2])\nplt.title("t")\nprint("plotted")');
  assert.equal(plot.error, null, plot.error?.traceback);
  assert.deepEqual(plot.logs.stdout.join(''), 'plotted\n');
  const png = plot.results.find((r) => typeof r.data['image/png'] === 'string');
  assert.ok(png, `no PNG among ${JSON.stringify(plot.results.map((r) => Object.keys(r.data)))}`);
  assert.deepEqual(
    Buffer.from(png.data['image/png'] as string, 'base64')
      .subarray(1, 4)
      .toString(),
    'PNG',
  );

  const html = await evalIn(id, 'class H:\n  def _repr_html_(self): return "<b>hi</b>"\nH()');
  assert.equal(html.results[0]?.data['text/html'], '<b>hi</b>');

  const err = await evalIn(id, 'def f():\n    raise ValueError("boom")\nf()');
  assert.equal(err.error?.name, 'ValueError');
  assert.equal(err.error?.value, 'boom');
  assert.match(err.error?.traceback ?? '', /line 2, in f/);

  const events: EvalEventT[] = [];
  const stream = await s.services.contexts.evalStream(id, {
    code: 'print("a", flush=True)\ntime.sleep(0.5)\nprint("b")\n6 * 7',
  });
  for await (const ev of stream) events.push(ev);
  assert.deepEqual(
    events.map((e) => e.type),
    ['stdout', 'stdout', 'stdout', 'stdout', 'result', 'end'],
  );
});

test('a timeout or an interrupt stops the code, not the context; restart gives fresh state', async () => {
  const id = ids[1]!;
  const looped = await evalIn(id, 'while True: pass', { timeout_ms: 1500 });
  assert.equal(looped.error?.name, 'TimeoutError');
  assert.equal(mainJson(await evalIn(id, 'x + 1')), 43);

  const sleeping = s.services.contexts.eval(id, { code: 'time.sleep(60)' });
  await new Promise((r) => setTimeout(r, 1500));
  await s.services.contexts.interrupt(id, 'python');
  assert.equal((await sleeping).error?.name, 'KeyboardInterrupt');

  const restarted = await s.services.contexts.restart(id, 'python');
  assert.equal(restarted.alive, true);
  assert.equal((await evalIn(id, 'x')).error?.name, 'NameError');

  const other = await s.services.contexts.create(id, {
    name: 'other',
    cwd: '/tmp',
    env: { MY_VAR: 'v' },
  });
  assert.equal(other.cwd, '/tmp');
  const where = await evalIn(id, 'import os\nos.getcwd(), os.environ["MY_VAR"]', {
    context: 'other',
  });
  assert.deepEqual(mainJson(where), ['/tmp', 'v']);
  await s.services.contexts.remove(id, 'other');
  await assert.rejects(
    evalIn(id, '1', { context: 'other' }),
    (e) => isForkdError(e) && e.code === 'context_not_found',
  );
});

test('fan-out: 5 variants in 5 children branched from the same state, one call', async () => {
  const id = ids[2]!;
  await evalIn(id, 'y = "from the source"');
  const variants = [0, 1, 2, 3, 4].map((i) => `${i}, y, numpy.random.rand()`);
  const out = await s.services.contexts.evalFork(id, { variants }, caller);
  assert.equal(out.results.length, 5);
  const values = fanOutJson(out) as Array<[number, string, number]>;
  assert.deepEqual(
    values.map((v) => v.slice(0, 2)),
    [0, 1, 2, 3, 4].map((i) => [i, 'from the source']),
  );
  assert.equal(
    new Set(values.map((v) => v[2])).size,
    5,
    'the children drew the same random numbers',
  );
  for (const r of out.results) assert.equal((await s.sandboxes.get(r.sandbox!)).state, 'stopped');
  await Promise.all(ids.map((i) => s.sandboxes.kill(i)));
  await s.snapshots.remove(out.snapshot, { force: true }).catch(() => undefined);
});
