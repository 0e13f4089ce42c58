/**
 * Eval benchmark (issue 16): under the daemon's real services, in-process, real VMs; for a
 * Python context (numpy imported) and a Node one:
 *  - eval round trip in a fork of a snapshot whose context is warm, vs `exec python3 -c` /
 *    `exec node -e` of the same code in the same fork (which starts the interpreter, and for
 *    Python imports numpy, each time);
 *  - eval fan-out of 10 variants end to end (branch + 10 children + 10 evals + kills).
 * Usage: node dist/bench/eval.js [--python | --node] [--quick] [--eval-only] (both languages
 * unless one is named). Needs the forkd-test-python / forkd-test-node images in the set-up
 * home (scripts/setup.sh builds them); the guest gets this checkout's agent.
 */
import { caller, startBenchServices, type BenchServices } from './services.js';
import { summary } from './stats.js';
import { NODE_IMAGE, PYTHON_IMAGE, privateGuest } from '../test/helpers/python-image.js';
import type { TestHome } from '../test/helpers/home.js';

const quick = process.argv.includes('--quick');
/** Only the round trips and their breakdown (no cold starts, no fan-out). */
const evalOnly = process.argv.includes('--eval-only');
const EVALS = quick ? 10 : 50;
const COLD = quick ? 3 : 10;
const FANOUTS = quick ? 1 : 3;

/** What one language's runs differ in. */
interface Language {
  name: 'python' | 'node';
  image: string;
  /** How its warm state is described in the output. */
  warm: string;
  /** Code run in the parent's context before the snapshot. */
  setup: string[];
  code: string;
  /** The same code as a one-off command: a fresh interpreter each time. */
  cold: string[];
  variant(i: number): string;
}

const PY_CODE = 'float(numpy.zeros(5).sum())';
const JS_CODE = '[1, 2, 3, 4, 5].map((n) => n * n).reduce((a, b) => a + b)';
const LANGUAGES: Language[] = [
  {
    name: 'python',
    image: PYTHON_IMAGE,
    warm: 'numpy imported',
    setup: ['import numpy'],
    code: PY_CODE,
    cold: ['python3', '-c', `import numpy; print(${PY_CODE})`],
    variant: (i) => `${i} + numpy.random.rand()`,
  },
  {
    name: 'node',
    image: NODE_IMAGE,
    warm: 'node started',
    setup: [],
    code: JS_CODE,
    cold: ['node', '-e', `console.log(${JS_CODE})`],
    variant: (i) => `${i} + Math.random()`,
  },
];

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const v = await fn();
  return [performance.now() - t0, v];
}

async function benchLanguage(s: BenchServices, lang: Language): Promise<void> {
  const tag = `${lang.name}-eval`;
  const context = lang.name;
  console.log(`\n## ${lang.name} (${lang.image})`);
  const [createMs] = await timed(() =>
    s.services.snapshots.create(
      { tag, image: lang.image, memory_mib: 512, contexts: [context], eval: lang.setup },
      caller,
    ),
  );
  console.log(`snapshot create with a ${lang.name} context: ${(createMs / 1000).toFixed(1)} s`);
  const fork = await s.services.snapshots.fork({ snapshot: tag, n: 1 }, caller);
  const id = fork.sandboxes[0]!.id;
  const evalOnce = () => s.services.contexts.eval(id, { code: lang.code, context });
  const [firstMs] = await timed(evalOnce);
  console.log(
    `first eval in a fresh fork (TCG translates the path once): ${firstMs.toFixed(1)} ms`,
  );
  for (let i = 0; i < 5; i++) await evalOnce();
  const evals: number[] = [];
  for (let i = 0; i < EVALS; i++) evals.push((await timed(evalOnce))[0]);
  console.log(`eval round trip in a fork (context warm, ${lang.warm}): ${summary(evals)}`);
  const inGuest: number[] = [];
  for (let i = 0; i < 10; i++) inGuest.push((await evalOnce()).duration_ms);
  console.log(`  of which the code itself ran in the interpreter: ${summary(inGuest)}`);
  const trues: number[] = [];
  for (let i = 0; i < 20; i++) {
    trues.push((await timed(() => s.services.sandboxes.exec(id, { argv: ['true'] })))[0]);
  }
  console.log(`  baseline, exec \`true\` in the same fork: ${summary(trues)}`);
  if (evalOnly) return;
  const cold: number[] = [];
  for (let i = 0; i < COLD; i++) {
    cold.push((await timed(() => s.services.sandboxes.exec(id, { argv: lang.cold })))[0]);
  }
  console.log(
    `exec ${lang.cold.slice(0, 2).join(' ')} of the same code in the same fork: ${summary(cold)}`,
  );
  const variants = Array.from({ length: 10 }, (_, i) => lang.variant(i));
  const fan: number[] = [];
  for (let i = 0; i < FANOUTS; i++) {
    const [ms, out] = await timed(() =>
      s.services.contexts.evalFork(id, { variants, context }, caller),
    );
    const ok = out.results.filter((r) => r.execution && !r.execution.error).length;
    console.log(`  fan-out ${i + 1}: ${ms.toFixed(0)} ms, ${ok}/10 results`);
    fan.push(ms);
  }
  console.log(
    `eval fan-out of 10 variants end to end (branch, 10 children, 10 evals, kills): ${summary(fan)}`,
  );
  await s.services.sandboxes.kill(id);
}

async function main(): Promise<void> {
  const named = LANGUAGES.filter((l) => process.argv.includes(`--${l.name}`));
  const languages = named.length ? named : LANGUAGES;
  const s = await startBenchServices(languages.map((l) => l.image));
  try {
    await privateGuest({ paths: s.p } as TestHome);
    for (const lang of languages) await benchLanguage(s, lang);
  } finally {
    await s.close();
  }
}

await main();
