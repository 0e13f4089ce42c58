/**
 * exec against the real agent: exit codes, signals, timeouts, stdin, streaming, bulk output
 * and concurrency. In --listen mode the commands run on the test host, so guest pids are
 * host pids and every long command is tracked for a kill at the end.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { isForkdError } from '../../../src/errors.js';
import { AgentClient, type ExecHandle } from '../../../src/drivers/agent/client.js';
import { startAgent, type AgentProcess } from '../../helpers/agent-process.js';

let agent: AgentProcess;
let client: AgentClient;

before(async () => {
  agent = await startAgent();
  client = await AgentClient.connect(agent.socketPath);
});

after(async () => {
  client?.close();
  await agent?.stop();
});

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const text = (b: Buffer) => b.toString('utf8');

/** Starts a command and registers its process group for the final cleanup. */
async function startTracked(handle: ExecHandle): Promise<number> {
  const pid = await handle.started;
  agent.track(pid);
  return pid;
}

function code(expected: string) {
  return (e: unknown) => isForkdError(e) && e.code === expected;
}

/** False once the process is gone or a zombie (its parent may not have reaped it yet). */
function running(pid: number): boolean {
  const stat = `/proc/${pid}/stat`;
  if (!existsSync(stat)) return false;
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(stat, 'utf8'));
  } catch {
    return false;
  }
}

/** `sh` with a `sleep 30` in the background; resolves once the child's pid is printed. */
async function withBackgroundChild(req: { timeoutMs?: number }) {
  let out = '';
  let printed: () => void = () => {};
  const pidLine = new Promise<void>((resolve) => (printed = resolve));
  const handle = client.exec(
    { argv: ['sh', '-c', 'sleep 30 & echo $!; wait'], ...req },
    {
      onStdout: (c) => {
        out += text(c);
        if (out.endsWith('\n')) printed();
      },
    },
  );
  await startTracked(handle);
  await pidLine;
  const child = Number(out.trim());
  assert.ok(running(child), 'background child runs');
  return { handle, child };
}

/** Waits up to a second for a process to die. */
async function gone(pid: number): Promise<boolean> {
  for (let i = 0; i < 50 && running(pid); i++) await sleep(20);
  return !running(pid);
}

test('echo hello prints hello and exits 0', async () => {
  const r = await client.run({ argv: ['echo', 'hello'] });
  assert.equal(text(r.stdout), 'hello\n');
  assert.equal(text(r.stderr), '');
  assert.deepEqual([r.exitCode, r.signal, r.timedOut], [0, null, false]);
  assert.ok(r.durationMs >= 0 && r.durationMs < 10_000, `durationMs ${r.durationMs}`);
});

test('the exit code comes back', async () => {
  const r = await client.run({ argv: ['sh', '-c', 'exit 7'] });
  assert.equal(r.exitCode, 7);
  assert.equal(r.signal, null);
});

test('a missing command is command_not_found and the agent keeps serving', async () => {
  const handle = client.exec({ argv: ['forkd-no-such-command-xyz'] });
  await assert.rejects(handle.started, code('command_not_found'));
  await assert.rejects(handle.result, code('command_not_found'));
  await client.ping();
  assert.equal(text((await client.run({ argv: ['echo', 'still'] })).stdout), 'still\n');
});

test('a file without execute permission is guest_permission_denied', async () => {
  const path = join(agent.dir, 'not-executable.sh');
  writeFileSync(path, '#!/bin/sh\necho no\n', { mode: 0o644 });
  await assert.rejects(client.run({ argv: [path] }), code('guest_permission_denied'));
});

test('stdout and stderr are kept apart', async () => {
  const r = await client.run({ argv: ['sh', '-c', 'echo out1; echo err1 >&2; echo out2'] });
  assert.equal(text(r.stdout), 'out1\nout2\n');
  assert.equal(text(r.stderr), 'err1\n');
});

test('stdin is piped to the command', async () => {
  const r = await client.run({ argv: ['wc', '-l'], stdinData: Buffer.from('a\nb\n') });
  assert.equal(text(r.stdout).trim(), '2');
});

test('without stdin the command reads /dev/null', { timeout: 10_000 }, async () => {
  const r = await client.run({ argv: ['cat'] });
  assert.deepEqual([r.exitCode, text(r.stdout)], [0, '']);
});

test('5 MB of stdin arrive intact', { timeout: 60_000 }, async () => {
  const data = randomBytes(5_000_000);
  const r = await client.run({ argv: ['sha256sum'], stdinData: data });
  assert.equal(text(r.stdout).split(' ')[0], sha256(data));
});

test('stdin reaches the command before eof', { timeout: 10_000 }, async () => {
  let out = '';
  let seen: () => void = () => {};
  const echoed = new Promise<void>((resolve) => (seen = resolve));
  const handle = client.exec(
    { argv: ['cat'], stdin: true },
    {
      onStdout: (c) => {
        out += text(c);
        if (out === 'ping\n') seen();
      },
    },
  );
  await startTracked(handle);
  await handle.writeStdin(Buffer.from('ping\n'));
  await echoed;
  await handle.endStdin();
  assert.equal((await handle.result).exitCode, 0);
});

test('20 MB of output arrive intact', { timeout: 120_000 }, async () => {
  const size = 20_000_000;
  const pattern = 'abcdefgh\n';
  const expected = Buffer.from(pattern.repeat(Math.ceil(size / pattern.length))).subarray(0, size);
  const r = await client.run({ argv: ['sh', '-c', `yes abcdefgh | head -c ${size}`] });
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout.length, size);
  assert.equal(sha256(r.stdout), sha256(expected));
});

test('output streams while the command runs', { timeout: 20_000 }, async () => {
  const arrivals: { at: number; text: string }[] = [];
  const handle = client.exec(
    { argv: ['sh', '-c', 'for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done'] },
    { onStdout: (c) => arrivals.push({ at: Date.now(), text: text(c) }) },
  );
  await startTracked(handle);
  const r = await handle.result;
  const ended = Date.now();
  assert.equal(r.exitCode, 0);
  assert.equal(arrivals.map((a) => a.text).join(''), 'line1\nline2\nline3\nline4\nline5\n');
  assert.ok(arrivals.length >= 3, `${arrivals.length} chunks for 5 spaced lines`);
  const first = arrivals[0]!.at;
  assert.ok(ended - first >= 600, `first chunk only ${ended - first} ms before the end`);
});

test('ten concurrent execs keep their outputs apart', { timeout: 30_000 }, async () => {
  const started = Date.now();
  const runs = await Promise.all(
    Array.from({ length: 10 }, (_, i) =>
      client.run({ argv: ['sh', '-c', `sleep 1; echo run${i}; echo err${i} >&2; exit ${i}`] }),
    ),
  );
  const elapsed = Date.now() - started;
  runs.forEach((r, i) => {
    assert.equal(text(r.stdout), `run${i}\n`);
    assert.equal(text(r.stderr), `err${i}\n`);
    assert.equal(r.exitCode, i);
  });
  assert.ok(elapsed < 6000, `10 one-second execs took ${elapsed} ms: not concurrent`);
});

test('a timeout kills the whole process group and says so', { timeout: 20_000 }, async () => {
  const { handle, child } = await withBackgroundChild({ timeoutMs: 500 });
  const r = await handle.result;
  assert.equal(r.timedOut, true);
  assert.equal(r.exitCode, null);
  assert.equal(r.signal, 'SIGKILL');
  assert.ok(r.durationMs >= 450 && r.durationMs < 5000, `durationMs ${r.durationMs}`);
  assert.equal(await gone(child), true, 'the background child was killed too');
});

test('kill() ends a running command with SIGKILL', { timeout: 20_000 }, async () => {
  const handle = client.exec({ argv: ['sleep', '30'] });
  await startTracked(handle);
  await handle.kill();
  const r = await handle.result;
  assert.deepEqual([r.exitCode, r.signal, r.timedOut], [null, 'SIGKILL', false]);
  await handle.kill(); // already finished: no error
});

test('kill() sends the named signal to the whole process group', { timeout: 20_000 }, async () => {
  const { handle, child } = await withBackgroundChild({});
  await handle.kill('SIGTERM');
  const r = await handle.result;
  assert.deepEqual([r.signal, r.timedOut], ['SIGTERM', false]);
  assert.equal(await gone(child), true, 'the background child got the signal too');
});

test('aborting the request signal kills the command', { timeout: 20_000 }, async () => {
  const ac = new AbortController();
  const handle = client.exec({ argv: ['sleep', '30'], signal: ac.signal });
  await startTracked(handle);
  ac.abort();
  assert.equal((await handle.result).signal, 'SIGKILL');
});

test('a command killed by SIGSEGV reports it and the agent keeps serving', async () => {
  const r = await client.run({ argv: ['sh', '-c', 'kill -SEGV $$'] });
  assert.deepEqual([r.exitCode, r.signal], [null, 'SIGSEGV']);
  await client.ping();
});

test('a background grandchild holding stdout does not delay the result', { timeout: 20_000 }, async () => {
  const handle = client.exec({ argv: ['sh', '-c', '(sleep 5; echo late) & echo early'] });
  await startTracked(handle);
  const started = Date.now();
  const r = await handle.result;
  assert.equal(r.exitCode, 0);
  assert.ok(Date.now() - started < 2000, `result took ${Date.now() - started} ms`);
});

test('env, cwd and the default environment apply', async () => {
  const r = await client.run({
    argv: ['sh', '-c', 'echo "$FOO|$(pwd)|$TERM|$HOME"; echo "$PATH"'],
    env: { FOO: 'bar' },
    cwd: agent.dir,
  });
  const [first, path] = text(r.stdout).split('\n');
  assert.equal(first, `bar|${agent.dir}|xterm|/root`);
  assert.equal(path, '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
});

test('user switches uid and home', async (t) => {
  const passwd = readFileSync('/etc/passwd', 'utf8');
  const nobody = /^nobody:[^:]*:(\d+):/m.exec(passwd)?.[1];
  if (process.getuid?.() !== 0 || nobody === undefined) return t.skip('needs root and nobody');
  const r = await client.run({ argv: ['id', '-u'], user: 'nobody', cwd: '/' });
  assert.equal(text(r.stdout).trim(), nobody);
  const byUid = await client.run({ argv: ['id', '-u'], user: nobody, cwd: '/' });
  assert.equal(text(byUid.stdout).trim(), nobody);
});

test('configure env applies to later execs and null removes it', async () => {
  const show = async () =>
    text((await client.run({ argv: ['sh', '-c', 'echo "[$FORKD_TEST_VAR]"'] })).stdout);
  await client.configure({ env: { FORKD_TEST_VAR: 'one' } });
  assert.equal(await show(), '[one]\n');
  await client.configure({ env: { FORKD_TEST_VAR: null } });
  assert.equal(await show(), '[]\n');
});

test('stdin beyond the 8 MiB buffer ends the exec with too_large', { timeout: 30_000 }, async () => {
  const handle = client.exec({ argv: ['sleep', '30'], stdin: true });
  await startTracked(handle);
  await handle.writeStdin(Buffer.alloc(10 * 1024 * 1024, 1));
  await assert.rejects(handle.result, (e: unknown) => {
    assert.ok(isForkdError(e, 'guest_error'), String(e));
    assert.equal(e.details?.agent_code, 'too_large');
    return true;
  });
  await client.ping();
});

test('the 257th concurrent exec is refused as busy', { timeout: 60_000 }, async (t) => {
  // A private agent: slots still held by earlier tests' execs (reaped a moment later under
  // load) must not count against this one.
  const own = await startAgent();
  t.after(() => own.stop());
  const c = await AgentClient.connect(own.socketPath);
  t.after(() => c.close());
  const handles = Array.from({ length: 256 }, () => c.exec({ argv: ['sleep', '30'] }));
  await Promise.all(handles.map(async (h) => own.track(await h.started)));
  const extra = c.exec({ argv: ['echo', 'one too many'] });
  await assert.rejects(extra.result, (e: unknown) => {
    assert.ok(isForkdError(e, 'guest_error'), String(e));
    assert.equal(e.details?.agent_code, 'busy');
    return true;
  });
  await Promise.all(handles.map((h) => h.kill()));
  const results = await Promise.all(handles.map((h) => h.result));
  assert.ok(results.every((r) => r.signal === 'SIGKILL'));
  assert.equal((await c.run({ argv: ['echo', 'free again'] })).exitCode, 0);
});
