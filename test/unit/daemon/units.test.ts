/** Daemon parts without VMs: the token file, --listen, socket path length, the run dir claim. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import { checkSocketPath, claimRunDir } from '../../../src/daemon/rundir.js';
import { parseListen } from '../../../src/daemon/servers.js';
import { loadTokens, parseTokens } from '../../../src/daemon/tokens.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'forkd-daemon-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

const badRequest = (e: unknown) => isForkdError(e, 'bad_request');

test('token files: ID:TOKEN lines, bare tokens, comments; short tokens refused', () => {
  const tokens = parseTokens('# ops\nci:0123456789abcdef0123\n\nfedcba9876543210fedcba # laptop\n');
  assert.deepEqual(
    [...tokens],
    [
      ['0123456789abcdef0123', 'ci'],
      ['fedcba9876543210fedcba', 'token-4'],
    ],
  );
  assert.throws(() => parseTokens('ci:short'), badRequest);
  assert.throws(() => parseTokens('# nothing\n'), badRequest);
});

test('a token file readable by others is refused', async () => {
  const file = join(dir, 'tokens');
  await writeFile(file, 'ci:0123456789abcdef0123\n', { mode: 0o644 });
  await chmod(file, 0o644);
  await assert.rejects(loadTokens(file), /chmod 600/);
  await chmod(file, 0o600);
  assert.equal((await loadTokens(file)).get('0123456789abcdef0123'), 'ci');
  await assert.rejects(loadTokens(join(dir, 'missing')), badRequest);
});

test('--listen takes HOST:PORT and [V6]:PORT', () => {
  assert.deepEqual(parseListen('127.0.0.1:7070'), { host: '127.0.0.1', port: 7070 });
  assert.deepEqual(parseListen('[::1]:0'), { host: '::1', port: 0 });
  for (const bad of ['7070', 'host:', 'host:99999', ':80']) {
    assert.throws(() => parseListen(bad), badRequest, bad);
  }
});

test('unix socket paths longer than 107 bytes are refused', () => {
  checkSocketPath('/' + 'a'.repeat(106));
  assert.throws(() => checkSocketPath('/' + 'a'.repeat(107)), badRequest);
});

test('the run dir is 0700 with a pid file, and a stale socket is cleared', async () => {
  const home = join(dir, 'home');
  const socket = join(home, 'run', 'forkd.sock');
  const run = await claimRunDir(home, socket);
  assert.equal((await stat(run.dir)).mode & 0o777, 0o700);
  assert.equal((await stat(run.pidFile)).mode & 0o777, 0o600);
  await writeFile(socket, ''); // a crashed daemon's socket: nobody answers
  await run.release();
  const again = await claimRunDir(home, socket);
  await again.release();
  await assert.rejects(stat(again.pidFile));
});
