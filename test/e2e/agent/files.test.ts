/**
 * File operations against the real agent, inside the test's own temp dir (in --listen mode
 * the agent's files are the host's, so each result is checked against node:fs as well).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isForkdError } from '../../../src/errors.js';
import { AgentClient } from '../../../src/drivers/agent/client.js';
import { startAgent, type AgentProcess } from '../../helpers/agent-process.js';

let agent: AgentProcess;
let client: AgentClient;
let root: string;

before(async () => {
  agent = await startAgent();
  client = await AgentClient.connect(agent.socketPath);
  root = join(agent.dir, 'files');
  mkdirSync(root);
});

after(async () => {
  client?.close();
  await agent?.stop();
});

/** A fresh directory per test, so listings see only that test's files. */
let dirs = 0;
function freshDir(): string {
  const dir = join(root, `t${++dirs}`);
  mkdirSync(dir);
  return dir;
}

function guestError(code: string, agentCode?: string | string[]) {
  return (e: unknown) => {
    assert.ok(isForkdError(e), `expected a ForkdError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    if (agentCode !== undefined) {
      assert.ok([agentCode].flat().includes(String(e.details?.agent_code)), e.message);
    }
    return true;
  };
}

for (const size of [0, 1, 10 * 1024 * 1024]) {
  test(`a ${size}-byte file round-trips byte for byte`, { timeout: 60_000 }, async () => {
    const dir = freshDir();
    const path = join(dir, 'blob.bin');
    const data = randomBytes(size);
    assert.equal(await client.writeFile(path, data), size);
    assert.ok(readFileSync(path).equals(data), 'on disk');
    assert.ok((await client.readFile(path)).equals(data), 'read back');
    assert.deepEqual(readdirSync(dir), ['blob.bin'], 'no temp file left behind');
  });
}

test('readFileStream yields chunks of at most 256 KiB that add up', { timeout: 30_000 }, async () => {
  const path = join(freshDir(), 'stream.bin');
  const data = randomBytes(3 * 1024 * 1024 + 17);
  writeFileSync(path, data);
  const parts: Buffer[] = [];
  for await (const part of client.readFileStream(path)) parts.push(part);
  assert.ok(parts.length >= 13, `${parts.length} chunks`);
  assert.ok(parts.every((p) => p.length <= 256 * 1024));
  assert.ok(Buffer.concat(parts).equals(data));
});

test('leaving readFileStream early stops the read and the client goes on', async () => {
  const path = join(freshDir(), 'big.bin');
  writeFileSync(path, randomBytes(4 * 1024 * 1024));
  for await (const part of client.readFileStream(path)) {
    assert.ok(part.length > 0);
    break;
  }
  assert.equal((await client.stat(path)).size, 4 * 1024 * 1024);
});

test('an aborted upload leaves nothing behind after a resync', { timeout: 30_000 }, async () => {
  const dir = freshDir();
  const ac = new AbortController();
  async function* slow() {
    yield Buffer.alloc(1000, 1);
    ac.abort(new Error('changed my mind'));
    yield Buffer.alloc(1000, 2);
  }
  await assert.rejects(
    client.writeFile(join(dir, 'aborted.bin'), slow(), { signal: ac.signal }),
    /changed my mind/,
  );
  await client.resync();
  await client.ping();
  assert.deepEqual(readdirSync(dir), []);
});

test('writeFile takes an async stream of uneven chunks', async () => {
  const path = join(freshDir(), 'streamed.bin');
  const pieces = [randomBytes(1), randomBytes(300 * 1024), Buffer.alloc(0), randomBytes(5)];
  async function* source() {
    yield* pieces;
  }
  assert.equal(await client.writeFile(path, source()), 300 * 1024 + 6);
  assert.ok(readFileSync(path).equals(Buffer.concat(pieces)));
});

test('writeFile replaces an existing file', async () => {
  const path = join(freshDir(), 'twice.txt');
  await client.writeFile(path, Buffer.from('first version, longer'));
  await client.writeFile(path, Buffer.from('second'));
  assert.equal(readFileSync(path, 'utf8'), 'second');
});

test('parent directories are created unless parents is false', async () => {
  const dir = freshDir();
  const deep = join(dir, 'a', 'b', 'c', 'file.txt');
  await client.writeFile(deep, Buffer.from('deep'));
  assert.equal(readFileSync(deep, 'utf8'), 'deep');
  await assert.rejects(
    client.writeFile(join(dir, 'x', 'y.txt'), Buffer.from('no'), { parents: false }),
    guestError('guest_file_not_found'),
  );
});

test('the mode is applied exactly', async () => {
  const dir = freshDir();
  for (const mode of [0o600, 0o755, 0o644, 0o777]) {
    const path = join(dir, `m${mode.toString(8)}`);
    await client.writeFile(path, Buffer.from('x'), { mode });
    assert.equal((await client.stat(path)).mode & 0o7777, mode);
    assert.equal(statSync(path).mode & 0o7777, mode);
  }
  const byDefault = join(dir, 'default');
  await client.writeFile(byDefault, Buffer.from('x'));
  assert.equal((await client.stat(byDefault)).mode & 0o7777, 0o644);
});

test('stat reports kind, size, mode and mtime without following symlinks', async () => {
  const dir = freshDir();
  const file = join(dir, 'f.txt');
  writeFileSync(file, 'hello');
  symlinkSync('f.txt', join(dir, 'link'));
  const s = await client.stat(file);
  assert.deepEqual([s.name, s.kind, s.size], ['f.txt', 'file', 5]);
  assert.ok(Math.abs(s.mtimeMs - statSync(file).mtimeMs) < 1000, 'mtime');
  assert.equal((await client.stat(dir)).kind, 'dir');
  assert.equal((await client.stat(join(dir, 'link'))).kind, 'symlink');
  assert.equal((await client.stat('/dev/null')).kind, 'other');
});

test('list returns sorted entries without . and ..', async () => {
  const dir = freshDir();
  writeFileSync(join(dir, 'b.txt'), 'bb');
  writeFileSync(join(dir, 'a.txt'), 'a');
  mkdirSync(join(dir, 'c'));
  symlinkSync('a.txt', join(dir, 'd'));
  const entries = await client.list(dir);
  assert.deepEqual(
    entries.map((e) => [e.name, e.kind]),
    [
      ['a.txt', 'file'],
      ['b.txt', 'file'],
      ['c', 'dir'],
      ['d', 'symlink'],
    ],
  );
  assert.equal(entries[1]!.size, 2);
  assert.deepEqual(await client.list(freshDir()), []);
});

test('list stops at 10 000 entries', { timeout: 60_000 }, async () => {
  const dir = freshDir();
  for (let i = 0; i <= 10_000; i++) writeFileSync(join(dir, `f${String(i).padStart(5, '0')}`), '');
  const entries = await client.list(dir);
  assert.equal(entries.length, 10_000);
  assert.equal(entries[0]!.name, 'f00000');
});

test('mkdir creates parents, applies the mode and refuses an existing dir without parents', async () => {
  const dir = freshDir();
  const deep = join(dir, 'x', 'y', 'z');
  // 0777 shows whether the agent's umask leaks into the mode asked for.
  await client.mkdir(deep, { parents: true, mode: 0o777 });
  assert.equal((await client.stat(deep)).kind, 'dir');
  assert.equal(statSync(deep).mode & 0o777, 0o777);
  await client.mkdir(join(dir, 'flat'), { mode: 0o775 });
  assert.equal(statSync(join(dir, 'flat')).mode & 0o777, 0o775);
  await client.mkdir(deep, { parents: true });
  await assert.rejects(client.mkdir(deep), guestError('guest_error', 'exists'));
  await assert.rejects(
    client.mkdir(join(dir, 'missing', 'child')),
    guestError('guest_file_not_found'),
  );
});

test('remove deletes files and needs recursive for a non-empty dir', async () => {
  const dir = freshDir();
  const file = join(dir, 'gone.txt');
  writeFileSync(file, 'x');
  await client.remove(file);
  await assert.rejects(client.stat(file), guestError('guest_file_not_found'));
  const tree = join(dir, 'tree');
  mkdirSync(join(tree, 'sub'), { recursive: true });
  writeFileSync(join(tree, 'sub', 'f'), 'x');
  await assert.rejects(client.remove(tree), guestError('guest_error', 'io'));
  await client.remove(tree, { recursive: true });
  assert.deepEqual(readdirSync(dir), []);
  await client.mkdir(join(dir, 'empty'));
  await client.remove(join(dir, 'empty'));
  await assert.rejects(client.remove(join(dir, 'never')), guestError('guest_file_not_found'));
});

test('missing paths are guest_file_not_found and wrong kinds are named', async () => {
  const dir = freshDir();
  const missing = join(dir, 'missing.txt');
  await assert.rejects(client.readFile(missing), guestError('guest_file_not_found'));
  await assert.rejects(client.stat(missing), guestError('guest_file_not_found'));
  await assert.rejects(client.list(missing), guestError('guest_file_not_found'));
  const file = join(dir, 'plain');
  writeFileSync(file, 'x');
  await assert.rejects(client.list(file), guestError('guest_error', 'not_dir'));
  await assert.rejects(client.readFile(dir), guestError('guest_error', 'is_dir'));
  await assert.rejects(
    client.writeFile(join(file, 'child'), Buffer.from('x')),
    guestError('guest_error', ['not_dir', 'exists']),
  );
  await client.ping();
});

test('user xattrs: xattr_set sets and removes them, stat and list report them; symlinks report their target', async () => {
  const dir = freshDir();
  const file = join(dir, 'a.txt');
  writeFileSync(file, 'x');
  symlinkSync('a.txt', join(dir, 'l'));
  assert.equal((await client.stat(file)).xattrs, undefined, 'none yet');
  await client.setXattrs(file, { 'user.e2b.author': 'mish', 'user.other': 'v' });
  assert.deepEqual((await client.stat(file)).xattrs, {
    'user.e2b.author': 'mish',
    'user.other': 'v',
  });
  await client.setXattrs(file, { 'user.other': null, 'user.never': null });
  const listed = await client.list(dir);
  assert.deepEqual(
    listed.map((e) => [e.name, e.xattrs, e.target]),
    [
      ['a.txt', { 'user.e2b.author': 'mish' }, undefined],
      ['l', undefined, 'a.txt'],
    ],
  );
  assert.equal((await client.stat(join(dir, 'l'))).target, 'a.txt');
  await assert.rejects(
    client.setXattrs(file, { 'trusted.x': 'v' }),
    guestError('guest_error', 'bad_request'),
    'only the user namespace',
  );
  await assert.rejects(
    client.setXattrs(join(dir, 'missing'), { 'user.a': 'b' }),
    guestError('guest_file_not_found'),
  );
});
