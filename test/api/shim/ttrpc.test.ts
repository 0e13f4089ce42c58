/**
 * The shim's ttrpc over a real unix socket, without containerd: frames, statuses
 * (NotImplemented for unknown methods, a handler's own code and message), concurrent calls
 * answered by stream id, and an event forwarded in containerd's envelope.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { CODE, serve, TtrpcClient, TtrpcError, type Handler } from '../../../src/shim/ttrpc.js';
import { decode, encode } from '../../../src/shim/proto.js';
import { Publisher } from '../../../src/shim/events.js';

async function withServer(
  handlers: Map<string, Handler>,
  fn: (path: string) => Promise<void>,
): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-ttrpc-'));
  const path = join(dir, 's');
  const server = await serve(path, handlers, () => undefined);
  try {
    await fn(path);
  } finally {
    server.close();
    await rm(dir, { recursive: true, force: true });
  }
}

test('a call returns its payload; concurrent calls come back to their callers', async () => {
  const handlers = new Map<string, Handler>([
    [
      'x.S/Echo',
      async (p) => {
        const { id } = decode<{ id: string }>('task.IdRequest', p);
        await sleep(id === 'slow' ? 50 : 0);
        return encode('task.PidResponse', { pid: id.length });
      },
    ],
  ]);
  await withServer(handlers, async (path) => {
    const c = await TtrpcClient.connect(`unix://${path}`);
    const call = (id: string) =>
      c
        .call('x.S', 'Echo', encode('task.IdRequest', { id }))
        .then((b) => decode<{ pid: number }>('task.PidResponse', b).pid);
    assert.deepEqual(await Promise.all([call('slow'), call('ab')]), [4, 2]);
    c.close();
  });
});

test('an unknown method is NotImplemented (12); a handler error keeps its code', async () => {
  const handlers = new Map<string, Handler>([
    [
      'x.S/Fail',
      async () => {
        throw new TtrpcError(CODE.notFound, 'no such task');
      },
    ],
  ]);
  await withServer(handlers, async (path) => {
    const c = await TtrpcClient.connect(path);
    await assert.rejects(c.call('x.S', 'Nope', new Uint8Array()), (e: TtrpcError) => {
      assert.equal(e.code, CODE.unimplemented);
      assert.match(e.message, /x\.S\/Nope is not implemented/);
      return true;
    });
    await assert.rejects(c.call('x.S', 'Fail', new Uint8Array()), {
      code: CODE.notFound,
      message: 'no such task',
    });
    c.close();
  });
});

test('an event reaches containerd as a ForwardRequest envelope, in order', async () => {
  const got: { topic: string; namespace: string; type_url: string; id: string }[] = [];
  const handlers = new Map<string, Handler>([
    [
      'containerd.services.events.ttrpc.v1.Events/Forward',
      async (p) => {
        const { envelope } = decode<{
          envelope: {
            topic: string;
            namespace: string;
            event: { type_url: string; value: Buffer };
          };
        }>('events.ForwardRequest', p);
        const ev = decode<{ container_id: string }>('events.TaskStart', envelope.event.value);
        got.push({
          topic: envelope.topic,
          namespace: envelope.namespace,
          type_url: envelope.event.type_url,
          id: ev.container_id,
        });
        return encode('google.protobuf.Empty', {});
      },
    ],
  ]);
  await withServer(handlers, async (path) => {
    const pub = new Publisher(path, 'k8s.io', () => undefined);
    void pub.publish('/tasks/start', { container_id: 'a', pid: 7 });
    await pub.publish('/tasks/start', { container_id: 'b', pid: 8 });
    pub.close();
  });
  assert.deepEqual(got, [
    {
      topic: '/tasks/start',
      namespace: 'k8s.io',
      type_url: 'containerd.events.TaskStart',
      id: 'a',
    },
    {
      topic: '/tasks/start',
      namespace: 'k8s.io',
      type_url: 'containerd.events.TaskStart',
      id: 'b',
    },
  ]);
});

test('a call on a connection the server closed fails at once, not never', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-ttrpc-'));
  const path = join(dir, 's');
  const server = createServer((s) => s.destroy()); // a containerd that went away
  await new Promise<void>((r) => server.listen(path, r));
  try {
    const c = await TtrpcClient.connect(path);
    await sleep(50);
    const started = Date.now();
    await assert.rejects(c.call('x.S', 'M', new Uint8Array()), /closed/);
    assert.ok(Date.now() - started < 1000);
  } finally {
    server.close();
    await rm(dir, { recursive: true, force: true });
  }
});
