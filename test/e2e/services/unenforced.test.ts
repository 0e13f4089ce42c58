/**
 * Nothing silently unenforced, end to end: a real `forkd daemon` dropped to an unprivileged
 * uid (setpriv, on a FORKD_HOME that uid owns) cannot make network namespaces, nftables
 * rules, cgroups or a uid of QEMU's own. A sandbox with an egress policy is refused, naming
 * what is missing and the flag that accepts it; under `--accept-unenforced` the same create
 * starts a real VM, and `info` and `ps` say what it runs without.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, chown, lstat, readdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { CLI, forkd as runCli } from '../../helpers/cli.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';

const NOBODY = 65534;
let home: TestHome | undefined;
let daemon: DaemonProcess | undefined;

/** Give `dir` and everything in it (not what its links point at) to `uid`. */
async function chownTree(dir: string, uid: number): Promise<void> {
  await chown(dir, uid, uid);
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if ((await lstat(path)).isSymbolicLink()) continue;
    if (e.isDirectory()) await chownTree(path, uid);
    else await chown(path, uid, uid);
  }
}

/** Directories given the search bit for others so `nobody` reaches the checkout, and their
 * modes before (a clean clone may sit in a 0700 temporary directory); put back after. */
const opened: { dir: string; mode: number }[] = [];

async function reachableByOthers(path: string): Promise<void> {
  for (let dir = dirname(path); dir !== dirname(dir); dir = dirname(dir)) {
    const { mode } = await stat(dir);
    if ((mode & 0o001) !== 0) continue;
    opened.push({ dir, mode: mode & 0o7777 });
    await chmod(dir, (mode & 0o7777) | 0o001);
  }
}

after(async () => {
  try {
    await daemon?.stop();
  } finally {
    await home?.cleanup();
    for (const { dir, mode } of opened.reverse()) await chmod(dir, mode);
  }
});

const forkd = (...args: string[]) => runCli(args, { env: (home as TestHome).env });
const POLICY = ['--network', 'nat', '--no-internet', '--allow-out', 'a.test'];

test('as an unprivileged user a sandbox with a policy is refused, naming why and the flag', async () => {
  home = await makeTestHome();
  await chownTree(home.dir, NOBODY);
  await reachableByOthers(CLI);
  daemon = await startDaemon(home, [], NOBODY);
  const r = await forkd('create', ...POLICY, '--json');
  assert.notEqual(r.code, 0, r.stdout.toString());
  assert.match(r.stderr, /cannot enforce what the sandbox asks/);
  assert.match(r.stderr, /network: no network namespace and nftables/);
  assert.match(r.stderr, /confinement: QEMU cannot run as a uid of its own/);
  assert.match(r.stderr, /forkd daemon --accept-unenforced/);
  const none = await forkd('ps', '--all', '--json');
  assert.deepEqual(JSON.parse(none.stdout.toString()), [], 'a refused create left a row');
  await daemon.stop();
});

test('with --accept-unenforced it starts, and info and ps report it unenforced', async () => {
  const h = home as TestHome;
  daemon = await startDaemon(h, ['--accept-unenforced'], NOBODY);
  const made = await forkd('create', ...POLICY, '--json');
  assert.equal(made.code, 0, made.stderr);
  const { id } = JSON.parse(made.stdout.toString()) as { id: string };
  const info = await forkd('info', id, '--json');
  const shown = JSON.parse(info.stdout.toString()) as {
    unenforced: string[];
    confinement?: { uid: number };
  };
  assert.ok(shown.unenforced.includes('network'), JSON.stringify(shown));
  assert.ok(shown.unenforced.includes('confinement'), JSON.stringify(shown));
  assert.equal(shown.confinement?.uid, NOBODY, 'QEMU runs as the daemon user');
  assert.match((await forkd('info', id)).stdout.toString(), /enforced\s+NOT network/);
  assert.match(
    (await forkd('ps')).stdout.toString(),
    new RegExp(`${id}\\s+running \\(NOT network`),
  );
  assert.equal((await forkd('kill', id)).code, 0);
});
