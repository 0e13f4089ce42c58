/**
 * Eval benchmark (issue 16): under the daemon's real services, in-process, real VMs.
 *  - eval round trip in a fork of a snapshot whose Python context imported numpy, vs
 *    `exec python3 -c` of the same code in the same fork (which imports numpy each time);
 *  - eval fan-out of 10 variants end to end (branch + 10 children + 10 evals + kills).
 * Usage: node dist/bench/eval.js [--quick] [--eval-only]. Needs the forkd-test-python image in the
 * set-up home (scripts/setup.sh builds it); the guest gets this checkout's agent.
 */
import { caller, startBenchServices } from './services.js';
import { summary } from './stats.js';
import { PYTHON_IMAGE, privateGuest } from '../test/helpers/python-image.js';
import type { TestHome } from '../test/helpers/home.js';

const quick = process.argv.includes('--quick');
/** Only the round trips and their breakdown (no cold imports, no fan-out). */
const evalOnly = process.argv.includes('--eval-only');
const EVALS = quick ? 10 : 50;
const COLD = quick ? 3 : 10;
const FANOUTS = quick ? 1 : 3;
const CODE = 'float(numpy.zeros(5).sum())';

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const v = await fn();
  return [performance.now() - t0, v];
}

async function main(): Promise<void> {
  const s = await startBenchServices([PYTHON_IMAGE]);
  try {
    await privateGuest({ paths: s.p } as TestHome);
    const [createMs] = await timed(() =>
      s.services.snapshots.create(
        {
          tag: 'py-eval',
          image: PYTHON_IMAGE,
          memory_mib: 512,
          contexts: ['python'],
          eval: ['import numpy'],
        },
        caller,
      ),
    );
    console.log(`snapshot create with a numpy context: ${(createMs / 1000).toFixed(1)} s`);
    const fork = await s.services.snapshots.fork({ snapshot: 'py-eval', n: 1 }, caller);
    const id = fork.sandboxes[0]!.id;
    const evalOnce = () => s.services.contexts.eval(id, { code: CODE });
    const [firstMs] = await timed(evalOnce);
    console.log(
      `first eval in a fresh fork (TCG translates the path once): ${firstMs.toFixed(1)} ms`,
    );
    for (let i = 0; i < 5; i++) await evalOnce();
    const evals: number[] = [];
    for (let i = 0; i < EVALS; i++) evals.push((await timed(evalOnce))[0]);
    console.log(`eval round trip in a fork (context warm, numpy imported): ${summary(evals)}`);
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
    const argv = ['python3', '-c', `import numpy; print(${CODE})`];
    for (let i = 0; i < COLD; i++) {
      cold.push((await timed(() => s.services.sandboxes.exec(id, { argv })))[0]);
    }
    console.log(
      `exec python3 -c of the same code in the same fork (imports numpy): ${summary(cold)}`,
    );
    const variants = Array.from({ length: 10 }, (_, i) => `${i} + numpy.random.rand()`);
    const fan: number[] = [];
    for (let i = 0; i < FANOUTS; i++) {
      const [ms, out] = await timed(() => s.services.contexts.evalFork(id, { variants }, caller));
      const ok = out.results.filter((r) => r.execution && !r.execution.error).length;
      console.log(`  fan-out ${i + 1}: ${ms.toFixed(0)} ms, ${ok}/10 results`);
      fan.push(ms);
    }
    console.log(
      `eval fan-out of 10 variants end to end (branch, 10 children, 10 evals, kills): ${summary(fan)}`,
    );
  } finally {
    await s.close();
  }
}

await main();
