/**
 * The CLI's daemon verbs end to end, as a user runs them: `forkd create/ps/exec/cp/logs/
 * kill/images/run` against a real `forkd daemon` child process on this file's own
 * FORKD_HOME (found through its default socket, as a user's would be), with real VMs.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Sandbox } from '@forkd/sdk';
import { forkd as runCli, type CliResult } from '../helpers/cli.js';
import { startDaemon, type DaemonProcess } from '../helpers/daemon-process.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../helpers/home.js';

let home: TestHome;
let daemon: DaemonProcess | undefined;

before(async () => {
  home = await makeTestHome();
  daemon = await startDaemon(home);
});
after(async () => {
  try {
    const url = daemon?.url;
    const left = url ? await Sandbox.list({ url }).catch(() => []) : [];
    await Promise.allSettled(left.map((s) => Sandbox.kill(s.id, { url })));
  } finally {
    await daemon?.stop();
    await home.cleanup();
  }
});

const forkd = (args: string[], input?: string | Buffer) => runCli(args, { env: home.env, input });

/** Run, require exit 0, parse stdout as JSON. */
async function json<T>(args: string[]): Promise<T> {
  const r = await forkd([...args, '--json']);
  assert.equal(r.code, 0, `forkd ${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout.toString()) as T;
}

const ok = (r: CliResult, what: string) => assert.equal(r.code, 0, `${what}: ${r.stderr}`);

interface SandboxJson {
  id: string;
  state: string;
  memory_mib: number;
  labels: Record<string, string>;
}

test('create, ps, exec, cp, logs, kill round trip with --json', async () => {
  const created = await json<SandboxJson>([
    'create',
    '--image',
    'busybox',
    '--memory',
    '192M',
    '--label',
    'suite=cli',
    '-e',
    'GREETING=hi',
  ]);
  assert.match(created.id, /^sbx-[0-9a-f]{12}$/);
  assert.equal(created.memory_mib, 192);
  const id = created.id;

  const listed = await json<SandboxJson[]>(['ps', '--label', 'suite=cli']);
  assert.deepEqual(
    listed.map((s) => [s.id, s.state, s.labels]),
    [[id, 'running', { suite: 'cli' }]],
  );
  const table = await forkd(['ps']);
  assert.match(table.stdout.toString(), new RegExp(`${id}\\s+running\\s+busybox`));

  const exec = await forkd(['exec', id, '--', 'sh', '-c', 'echo $GREETING; echo oops >&2; exit 5']);
  assert.equal(exec.code, 5);
  assert.equal(exec.stdout.toString(), 'hi\n');
  assert.equal(exec.stderr, 'oops\n');
  const piped = await forkd(['exec', id, '--cwd', '/tmp', '--', 'sh', '-c', 'pwd; wc -c'], 'abc');
  assert.equal(piped.stdout.toString(), '/tmp\n3\n', piped.stderr);
  const timedOut = await forkd(['exec', id, '--timeout', '1', '--', 'sleep', '30']);
  assert.equal(timedOut.code, 124);

  const local = join(home.dir, 'up.bin');
  const data = randomBytes(3 * 1024 * 1024 + 7);
  await writeFile(local, data);
  const up = await json<{ to: string; size: number }>(['cp', local, `${id}:/tmp/`]);
  assert.deepEqual(up, { from: local, to: `${id}:/tmp/up.bin`, size: data.length });
  const back = join(home.dir, 'down.bin');
  ok(await forkd(['cp', `${id}:/tmp/up.bin`, back]), 'cp down');
  assert.ok((await readFile(back)).equals(data), 'cp round trip is byte-identical');
  const toStdout = await forkd(['cp', `${id}:/tmp/up.bin`, '-']);
  assert.ok(toStdout.stdout.equals(data), 'cp to stdout');
  ok(await forkd(['cp', '-', `${id}:/tmp/from-stdin`], 'piped'), 'cp from stdin');
  assert.equal(
    (await forkd(['exec', id, '--', 'cat', '/tmp/from-stdin'])).stdout.toString(),
    'piped',
  );

  const logs = await forkd(['logs', id]);
  ok(logs, 'logs');
  assert.match(logs.stdout.toString(), /forkd-agent/);

  const killed = await json<{ killed: string[]; failed: unknown[] }>(['kill', id]);
  assert.deepEqual(killed, { killed: [id], failed: [] });
  assert.deepEqual(await json<SandboxJson[]>(['ps']), []);
  const all = await json<SandboxJson[]>(['ps', '--all']);
  assert.equal(all.find((s) => s.id === id)?.state, 'stopped');
});

test('kill --all, and failures named with their code', async () => {
  const a = (await json<SandboxJson>(['create'])).id;
  const b = (await json<SandboxJson>(['create'])).id;
  const missing = await forkd(['kill', 'sbx-000000000000', a]);
  assert.equal(missing.code, 3);
  assert.equal(missing.stdout.toString(), `${a}\n`);
  assert.match(missing.stderr, /sbx-000000000000: .*\[sandbox_not_found\]/);
  const rest = await json<{ killed: string[] }>(['kill', '--all']);
  assert.deepEqual(rest.killed, [b]);
  const usage = await forkd(['kill']);
  assert.equal(usage.code, 2);
});

test('errors: unknown sandbox, bad input, and a daemon that is not there', async () => {
  const unknown = await forkd(['exec', 'sbx-000000000000', '--', 'true']);
  assert.equal(unknown.code, 3);
  assert.match(unknown.stderr, /\[sandbox_not_found\]/);
  const bad = await forkd(['create', '--memory', '8']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /\[bad_request\]/);
  const nowhere = await forkd(['ps', '--url', `unix:${join(home.dir, 'nobody.sock')}`]);
  assert.equal(nowhere.code, 5);
  assert.match(nowhere.stderr, /forkd daemon.*\[daemon_unreachable\]/);
});

test('images lists through the daemon; run goes through it and cleans up', async () => {
  const images = await json<{ name: string; size_bytes: number }[]>(['images']);
  assert.ok(images.some((i) => i.name === 'busybox' && i.size_bytes > 0));
  const run = await forkd(['run', '--', 'sh', '-c', 'echo $FORKD_SANDBOX_ID; exit 3']);
  assert.equal(run.code, 3, run.stderr);
  const id = run.stdout.toString().trim();
  const all = await json<SandboxJson[]>(['ps', '--all']);
  assert.equal(all.find((s) => s.id === id)?.state, 'stopped', 'the daemon ran it and killed it');
  const missing = await forkd(['run', '--', 'no-such-command']);
  assert.equal(missing.code, 127);
});

test('nothing is left behind', async () => {
  assert.deepEqual(await json<SandboxJson[]>(['ps']), []);
  await assertNoLeftovers(home);
});
