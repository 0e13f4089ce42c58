/**
 * The CLI's daemon verbs end to end, as a user runs them: `forkd create/ps/exec/cp/logs/
 * kill/images/run/tree` against a real `forkd daemon` child process on this file's own
 * FORKD_HOME (found through its default socket, as a user's would be), with real VMs: 20 MB
 * copied both ways byte for byte, trees with -r, cp's missing-directory rules, a missing
 * user or cwd reported as such, the logs of a stopped sandbox, kill --label, the tree of
 * branches of branches.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { forkd as runCli, type CliResult } from '../../helpers/cli.js';
import { daemonForFile } from '../../helpers/daemon-process.js';
import { assertNoLeftovers } from '../../helpers/home.js';

const file = daemonForFile();

const forkd = (args: string[], input?: string | Buffer) =>
  runCli(args, { env: file.home.env, input });

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
  assert.match(
    table.stdout.toString(),
    new RegExp(`${id}\\s+running\\s+running\\s+pause 60s, hibernate 3600s \\(daemon\\)\\s+busybox`),
  );

  const exec = await forkd(['exec', id, '--', 'sh', '-c', 'echo $GREETING; echo oops >&2; exit 5']);
  assert.equal(exec.code, 5);
  assert.equal(exec.stdout.toString(), 'hi\n');
  assert.equal(exec.stderr, 'oops\n');
  const piped = await forkd(['exec', id, '--cwd', '/tmp', '--', 'sh', '-c', 'pwd; wc -c'], 'abc');
  assert.equal(piped.stdout.toString(), '/tmp\n3\n', piped.stderr);
  const timedOut = await forkd(['exec', id, '--timeout', '1', '--', 'sleep', '30']);
  assert.equal(timedOut.code, 124);

  const local = join(file.home.dir, 'up.bin');
  const data = randomBytes(3 * 1024 * 1024 + 7);
  await writeFile(local, data);
  const up = await json<{ to: string; size: number }>(['cp', local, `${id}:/tmp/`]);
  assert.deepEqual(up, { from: local, to: `${id}:/tmp/up.bin`, size: data.length });
  const back = join(file.home.dir, 'down.bin');
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
  const nowhere = await forkd(['ps', '--url', `unix:${join(file.home.dir, 'nobody.sock')}`]);
  assert.equal(nowhere.code, 5);
  assert.match(nowhere.stderr, /forkd daemon.*\[daemon_unreachable\]/);
});

test('images lists through the daemon; run goes through it and cleans up', async () => {
  const images = await json<{ name: string; size_bytes: number }[]>(['images']);
  assert.ok(images.some((i) => i.name === 'busybox' && i.size_bytes > 0));
  const run = await forkd(['run', '--', 'sh', '-c', 'echo $FORKD_SANDBOX_ID; exit 3']);
  assert.equal(run.code, 3, run.stderr);
  const id = run.stdout.toString().trim();
  // run exits once the exit code is known; the daemon finishes the kill in the background.
  let state: string | undefined;
  for (let i = 0; i < 600 && state !== 'stopped'; i++) {
    if (i > 0) await sleep(100);
    state = (await json<SandboxJson[]>(['ps', '--all'])).find((s) => s.id === id)?.state;
  }
  assert.equal(state, 'stopped', 'the daemon ran it and killed it');
  const missing = await forkd(['run', '--', 'no-such-command']);
  assert.equal(missing.code, 127);
});

test('cp: 20 MB both ways byte-identical; -r trees; missing directories named, -p makes them', async () => {
  const id = (await json<SandboxJson>(['create'])).id;
  const big = join(file.home.dir, 'big.bin');
  const data = randomBytes(20 * 1000 * 1000);
  await writeFile(big, data);
  ok(await forkd(['cp', big, `${id}:/root/big.bin`]), 'cp up 20 MB');
  const back = join(file.home.dir, 'big-back.bin');
  ok(await forkd(['cp', `${id}:/root/big.bin`, back]), 'cp down 20 MB');
  assert.ok((await readFile(back)).equals(data), '20 MB round trip is byte-identical');

  const noDir = await forkd(['cp', big, `${id}:/no/such/dir/x`]);
  assert.equal(noDir.code, 3, noDir.stderr);
  assert.match(noDir.stderr, new RegExp(`${id}:/no/such/dir: no such directory in the sandbox`));
  ok(await forkd(['cp', '-p', back, `${id}:/no/such/dir/x`]), 'cp -p');
  const hostNoDir = await forkd(['cp', `${id}:/root/big.bin`, join(file.home.dir, 'none', 'x')]);
  assert.equal(hostNoDir.code, 2, hostNoDir.stderr);
  assert.match(
    hostNoDir.stderr,
    new RegExp(`${join(file.home.dir, 'none')}: no such directory on this host`),
  );
  assert.doesNotMatch(hostNoDir.stderr, /forkd-\d+\.part|internal/, "names the user's path");

  const tree = join(file.home.dir, 'tree');
  await mkdir(join(tree, 'sub'), { recursive: true });
  await writeFile(join(tree, 'run.sh'), '#!/bin/sh\necho ran\n', { mode: 0o755 });
  await writeFile(join(tree, 'sub', 'data.bin'), data.subarray(0, 100_000));
  await symlink('run.sh', join(tree, 'link'));
  const dirOnly = await forkd(['cp', tree, `${id}:/root/`]);
  assert.equal(dirOnly.code, 2);
  assert.match(dirOnly.stderr, /is a directory \(copy it with -r\)/);
  ok(await forkd(['cp', '-r', tree, `${id}:/root/`]), 'cp -r up');
  const ran = await forkd([
    'exec',
    id,
    '--',
    'sh',
    '-c',
    'cd /root/tree && ./link && wc -c < sub/data.bin',
  ]);
  assert.equal(ran.stdout.toString(), 'ran\n100000\n', ran.stderr);
  const down = join(file.home.dir, 'tree-back');
  ok(await forkd(['cp', '-r', `${id}:/root/tree`, down]), 'cp -r down');
  assert.deepEqual((await readdir(down)).sort(), ['link', 'run.sh', 'sub']);
  assert.ok((await readFile(join(down, 'sub', 'data.bin'))).equals(data.subarray(0, 100_000)));
  ok(await forkd(['kill', id]), 'kill');
});

test('exec: a missing user and a missing cwd are reported as such, not as a missing command', async () => {
  const id = (await json<SandboxJson>(['create'])).id;
  const user = await forkd(['exec', id, '--user', 'nosuchuser', '--', 'true']);
  assert.equal(user.code, 126, user.stderr);
  assert.match(
    user.stderr,
    /--user nosuchuser: no such user in the sandbox image's \/etc\/passwd.*\[user_not_found\]/,
  );
  const cwd = await forkd(['exec', id, '--cwd', '/missing', '--', 'true']);
  assert.equal(cwd.code, 126, cwd.stderr);
  assert.match(cwd.stderr, /--cwd \/missing: no such directory in the sandbox \[cwd_not_found\]/);
  const command = await forkd(['exec', id, '--', 'no-such-command']);
  assert.equal(command.code, 127);
  assert.match(command.stderr, /no-such-command: command not found in image/);
  ok(await forkd(['kill', id]), 'kill');
});

test('logs of a stopped sandbox; kill --label; ps shows the snapshot; memory past the host', async () => {
  const a = (await json<SandboxJson>(['create', '--label', 'batch=7'])).id;
  const b = (await json<SandboxJson>(['create', '--label', 'batch=7'])).id;
  const c = (await json<SandboxJson>(['create', '--label', 'batch=8'])).id;
  const killed = await json<{ killed: string[] }>(['kill', '--label', 'batch=7']);
  assert.deepEqual(killed.killed.sort(), [a, b].sort());
  const logs = await forkd(['logs', a]);
  ok(logs, 'logs of a stopped sandbox');
  assert.match(logs.stdout.toString(), /forkd-agent/);
  const table = (await forkd(['ps'])).stdout.toString();
  assert.match(table, /^ID\s+STATE\s+TIER\s+IDLE\s+IMAGE\s+SNAPSHOT\s+MEMORY/);
  assert.match(
    table,
    new RegExp(
      `${c}\\s+running\\s+running\\s+pause 60s, hibernate 3600s \\(daemon\\)\\s+busybox\\s+boot-[0-9a-f]+\\s+256M`,
    ),
  );
  const huge = await forkd(['create', '--memory', '64G']);
  assert.equal(huge.code, 2, huge.stderr);
  assert.match(huge.stderr, /--memory must be between 64M and the host's [\d.]+G \[bad_request\]/);
  ok(await forkd(['kill', c]), 'kill');
});

test('tree: branches of one sandbox are siblings under it, a branch of a branch nests', async () => {
  ok(await forkd(['snapshot', 'create', '--tag', 'tw', '--warm', 'echo w > /w']), 'snapshot');
  const src = (await forkd(['fork', 'tw'])).stdout.toString().trim();
  ok(await forkd(['branch', src, '--tag', 'tb1']), 'branch 1');
  ok(await forkd(['branch', src, '--tag', 'tb2']), 'branch 2');
  const kid = (await forkd(['fork', 'tb1'])).stdout.toString().trim();
  ok(await forkd(['branch', kid, '--tag', 'tb3']), 'branch of a branch');
  const drawn = (await forkd(['tree', 'tw'])).stdout.toString();
  assert.equal(
    drawn.replaceAll(src, 'SRC').replaceAll(kid, 'KID'),
    [
      '(image busybox)',
      '└── snapshot tw (ready)',
      '    └── sandbox SRC (running)',
      '        ├── snapshot tb1 (ready)',
      '        │   └── sandbox KID (running)',
      '        │       └── snapshot tb3 (ready)',
      '        └── snapshot tb2 (ready)',
      '',
    ].join('\n'),
  );
  ok(await forkd(['kill', src, kid]), 'kill');
  ok(await forkd(['rmi', 'tw', '--cascade']), 'rmi');
});

test('nothing is left behind', async () => {
  assert.deepEqual(await json<SandboxJson[]>(['ps']), []);
  await assertNoLeftovers(file.home);
});
