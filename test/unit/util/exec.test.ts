/**
 * A host tool killed by a signal forkd did not send (the OOM killer, a user) is reported as
 * killed, naming the tool and the signal, not as a bare "Command failed"; a timeout of ours
 * keeps its own message. Tools run through forkd-tool-exec: their exit and output come
 * through unchanged, and a tool (and what it started) dies with the process that ran it.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isForkdError } from '../../../src/errors.js';
import { run, runStreaming } from '../../../src/util/exec.js';

const killedBy = (e: unknown) =>
  isForkdError(e, 'internal') && /^sh was killed \(SIGKILL\) before it finished/.test(e.message);

test('a tool SIGKILLed from outside: named, with the signal', async () => {
  await assert.rejects(run('sh', ['-c', 'kill -9 $$']), killedBy);
  await assert.rejects(
    runStreaming('sh', ['-c', 'kill -9 $$'], () => undefined),
    killedBy,
  );
});

test('a timeout of ours is not reported as a kill from outside', async () => {
  await assert.rejects(
    run('sleep', ['5'], { timeoutMs: 100 }),
    (e: unknown) => isForkdError(e, 'internal') && !/killed \(/.test(e.message),
  );
});

test('a missing tool is setup_required naming it', async () => {
  await assert.rejects(
    run('forkd-no-such-tool', []),
    (e: unknown) =>
      isForkdError(e, 'setup_required') && /forkd-no-such-tool is not installed/.test(e.message),
  );
});

test("a tool's exit code, output and own signal come through the launcher", async () => {
  assert.deepEqual(await run('sh', ['-c', 'echo out; echo err >&2']), {
    stdout: 'out\n',
    stderr: 'err\n',
  });
  await assert.rejects(run('sh', ['-c', 'echo bad >&2; exit 3']), /sh failed: bad/);
});

test('a tool and its children die with the process that ran it (a daemon SIGKILLed)', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-tool-exec-'));
  try {
    // A Node process runs a tool that starts a child of its own; each writes its pid.
    const script = `import { run } from ${JSON.stringify(new URL('../../../src/util/exec.js', import.meta.url).href)};
      run('sh', ['-c', 'sleep 60 & echo $! > ${dir}/child; echo $$ > ${dir}/tool; wait']);`;
    const node = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: 'ignore',
    });
    const pids = async () =>
      Promise.all(['tool', 'child'].map(async (f) => Number(await readFile(join(dir, f), 'utf8'))));
    for (
      let i = 0;
      i < 200 &&
      !(await pids().then(
        (p) => p.every((x) => x > 0),
        () => false,
      ));
      i++
    )
      await sleep(50);
    const [tool, child] = await pids();
    node.kill('SIGKILL');
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    for (let i = 0; i < 100 && (alive(tool!) || alive(child!)); i++) await sleep(50);
    assert.equal(alive(tool!), false, 'the tool outlived its parent');
    assert.equal(alive(child!), false, "the tool's own child outlived it");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
