/**
 * Which forkd image a task's root is (rootfs.ts): the chain ID of its container's image
 * layers, asked of containerd over gRPC (grpc.ts) — here a stand-in HTTP/2 server on a
 * unix socket answering containers' Get and snapshots' Stat as containerd 1.6 does.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Http2Server } from 'node:http2';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rootfsChainId, rootfsImageName } from '../../../src/shim/rootfs.js';
import { decode, encode } from '../../../src/shim/proto.js';

const CHAIN = `sha256:${'ab'.repeat(32)}`;

/** Frame a message as gRPC does: u8 flag, u32 length, the bytes. */
function frame(bytes: Uint8Array): Buffer {
  const b = Buffer.alloc(5 + bytes.length);
  b.writeUInt32BE(bytes.length, 1);
  b.set(bytes, 5);
  return b;
}

/** The answer of containerd 1.6 to call `path` with `body`; undefined: NotFound. */
function answerOf(path: string, body: Buffer): Uint8Array | undefined {
  if (path.endsWith('.Containers/Get')) {
    const { id } = decode<{ id: string }>('containers.GetContainerRequest', body);
    if (id !== 'c1' && id !== 'bare') return undefined;
    const container = id === 'c1' ? { snapshotter: 'overlayfs', snapshot_key: id } : {};
    return encode('containers.GetContainerResponse', { container });
  }
  const { key } = decode<{ key: string }>('snapshots.StatSnapshotRequest', body);
  return encode('snapshots.StatSnapshotResponse', { info: { name: key, parent: CHAIN } });
}

/** A containerd stand-in: container `c1` on snapshot `c1` whose parent is CHAIN; `bare` has none. */
async function fakeContainerd(fn: (socket: string, seen: string[]) => Promise<void>) {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-grpc-'));
  const socket = join(dir, 'containerd.sock');
  const seen: string[] = [];
  const server: Http2Server = createServer();
  server.on('stream', (stream, headers) => {
    const path = String(headers[':path']);
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      const body = Buffer.concat(chunks).subarray(5);
      seen.push(`${path} ${String(headers['containerd-namespace'])}`);
      const answer = answerOf(path, body);
      stream.respond(
        { ':status': 200, 'content-type': 'application/grpc' },
        { waitForTrailers: true },
      );
      stream.on('wantTrailers', () =>
        stream.sendTrailers(
          answer ? { 'grpc-status': '0' } : { 'grpc-status': '5', 'grpc-message': 'not%20found' },
        ),
      );
      stream.end(answer ? frame(answer) : undefined);
    });
  });
  await new Promise<void>((r) => server.listen(socket, r));
  try {
    await fn(socket, seen);
  } finally {
    await new Promise((r) => server.close(r));
    await rm(dir, { recursive: true, force: true });
  }
}

test("a task's root is the chain ID of its container snapshot's parent", async () => {
  await fakeContainerd(async (socket, seen) => {
    const c = { address: socket, namespace: 'k8s.io' };
    assert.equal(await rootfsChainId(c, 'c1'), CHAIN);
    assert.deepEqual(seen, [
      '/containerd.services.containers.v1.Containers/Get k8s.io',
      '/containerd.services.snapshots.v1.Snapshots/Stat k8s.io',
    ]);
    // `ctr run --rootfs DIR`: a container with no snapshot has no image to import.
    assert.equal(await rootfsChainId(c, 'bare'), undefined);
    await assert.rejects(rootfsChainId(c, 'nope'), /Containers\/Get: not found/);
  });
});

test('the image name is the chain ID, cut to what an image name holds', () => {
  const name = rootfsImageName(CHAIN);
  assert.equal(name, `rootfs-${'ab'.repeat(28)}`);
  assert.equal(name.length, 63);
  assert.throws(() => rootfsImageName('sha512:00'), /no sha256 chain ID/);
});
