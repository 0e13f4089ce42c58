/**
 * Resuming a blob download from its `.partial` (pack pulls): a partial that already holds the
 * whole blob — the daemon killed between the last byte and the rename — is verified and used,
 * not sent as a range the registry answers 416 to on every retry (found by the daemon kill
 * in test/e2e/faults/kill.test.ts); a partial that is no prefix of the blob starts over.
 * A loopback HTTP server plays the registry and answers ranges as docker-registry does.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RegistryClient } from '../../../src/drivers/registry/index.js';

const blob = randomBytes(64 * 1024);
const digest = `sha256:${createHash('sha256').update(blob).digest('hex')}`;
let server: Server;
let host: string;
let dir: string;
const ranges: string[] = [];

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'forkd-resume-'));
  server = createServer((req, res) => {
    if (req.url === '/v2/') return void res.writeHead(200).end('{}');
    if (req.url !== `/v2/team/env/blobs/${digest}`) return void res.writeHead(404).end();
    const range = req.headers.range;
    ranges.push(range ?? '');
    if (!range) return void res.writeHead(200).end(blob);
    const from = Number(/^bytes=(\d+)-$/.exec(range)?.[1]);
    if (from >= blob.length) return void res.writeHead(416).end();
    res.writeHead(206, { 'content-range': `bytes ${from}-${blob.length - 1}/${blob.length}` });
    res.end(blob.subarray(from));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  await new Promise((r) => server.close(r));
  await rm(dir, { recursive: true, force: true });
});

async function fetchWith(partial: Buffer | undefined, name: string) {
  const dest = join(dir, name);
  if (partial) await writeFile(`${dest}.partial`, partial);
  ranges.length = 0;
  const got = await new RegistryClient(host).getBlobResumable('team/env', digest, dest, {
    size: blob.length,
  });
  assert.deepEqual(await readFile(dest), blob);
  return got;
}

test('a partial holding the whole blob is used as it is, with no request', async () => {
  const got = await fetchWith(blob, 'whole');
  assert.equal(got.resumedBytes, blob.length);
  assert.deepEqual(ranges, []);
});

test('a partial prefix resumes from its end', async () => {
  const got = await fetchWith(blob.subarray(0, 1000), 'prefix');
  assert.equal(got.resumedBytes, 1000);
  assert.deepEqual(ranges, ['bytes=1000-']);
});

test('a partial that is not this blob (as long, or longer) starts over', async () => {
  assert.equal((await fetchWith(randomBytes(blob.length), 'other')).resumedBytes, 0);
  assert.equal((await fetchWith(randomBytes(blob.length + 10), 'longer')).resumedBytes, 0);
  assert.deepEqual(ranges, ['']);
});
