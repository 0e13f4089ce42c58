/**
 * Pods under containerd-shim-forkd-v2 on a CNI network (Debian's `bridge` + `host-local`
 * plugins, on a bridge and subnet of the test's), driven through the CRI gRPC API as a
 * kubelet drives it: a pod forked from a `network nat` snapshot, and a pod without a
 * snapshot whose VM is made from its first container's image, each run its QEMU in the
 * pod's network namespace: the guest's HTTP server answers on the pod IP and its
 * connections leave from that IP. The images are built and imported by the helpers.
 */
import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox, Snapshot, isForkdError, type SandboxInfo } from '@forkd/sdk';
import { startCriNode, type CriNode } from '../../helpers/cri-node.js';
import { leftoverMounts } from '../../helpers/containerd.js';
import type { PodConfig } from '../../helpers/cri.js';

/** The pods' CNI network: a bridge in the host namespace, the gateway at .1 on it. */
const POD_NETWORK = { bridge: 'fkdtest-br1', subnet: '10.203.118.0/24' };
const GATEWAY = '10.203.118.1';
/** An image whose root serves a page, for the pod without a snapshot. */
const WEB_IMAGE = 'localhost/forkd-test-web:1';

let node: CriNode;

before(async () => {
  node = await startCriNode(POD_NETWORK);
});

after(() => node?.stop());

/** The running forkd sandboxes of the pod `id`. */
function sandboxesOf(id: string) {
  return Sandbox.list({ url: node.daemon.url, label: `containerd.io/id=${id}`, state: 'running' });
}

async function until(what: string, check: () => Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline)
      throw new Error(`${what}: not within ${ms} ms\n${node.ctrd.output()}`);
    await sleep(250);
  }
}

/** GET `url` with a 5 s limit; undefined while nothing answers. */
async function get(url: string): Promise<string | undefined> {
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    return await r.text();
  } catch {
    return undefined;
  }
}

/** A server on the bridge's gateway answering each request with its peer's address. */
async function peerEcho(): Promise<Server> {
  const server = createServer((req, res) => res.end(req.socket.remoteAddress ?? ''));
  await new Promise<void>((r) => server.listen(0, GATEWAY, r));
  return server;
}

/**
 * Run pod `pod` (on the CNI network, guest port 8080 forwarded) with a container of `image`
 * serving /www on 8080: it answers on the pod IP, and its connection to the gateway comes
 * from that IP; once the pod is removed nothing answers and no VM is left. Answers the pod's
 * VM as the daemon showed it while it ran.
 */
async function servesOnPodIp(
  t: TestContext,
  pod: PodConfig,
  image: string,
): Promise<SandboxInfo | undefined> {
  let started = Date.now();
  const id = await node.cri.runPodSandbox(pod, 'forkd');
  t.diagnostic(`RunPodSandbox on a CNI network: ${Date.now() - started} ms`);
  // The bridge exists once CNI has set up the first pod.
  const seen = await peerEcho();
  try {
    const ip = (await node.cri.podSandboxStatus(id)).status.network?.ip ?? '';
    assert.match(ip, /^10\.203\.118\.\d+$/, 'CNI gave the pod an address');
    const web = await node.cri.createContainer(
      id,
      {
        metadata: { name: 'web' },
        image: { image },
        command: ['busybox', 'httpd', '-f', '-p', '8080', '-h', '/www'],
        log_path: 'web.log',
      },
      pod,
    );
    started = Date.now();
    await node.cri.startContainer(web);
    t.diagnostic(`StartContainer: ${Date.now() - started} ms`);
    let body: string | undefined;
    await until(
      'the guest answers on the pod IP',
      async () => (body = await get(`http://${ip}:8080/`)) !== undefined,
      60_000,
    );
    assert.equal(body, 'hello-from-the-guest\n');
    const port = (seen.address() as AddressInfo).port;
    const out = await node.cri.execSync(
      web,
      ['busybox', 'wget', '-qO-', `http://${GATEWAY}:${port}/`],
      60,
    );
    assert.deepEqual(out, { stdout: ip, stderr: '', code: 0 }, 'the guest is NATed to the pod IP');
    const [vm, ...more] = await sandboxesOf(id);
    assert.deepEqual(more, [], 'one pod, one VM');
    await node.cri.stopPodSandbox(id);
    await node.cri.removePodSandbox(id);
    assert.deepEqual(await sandboxesOf(id), []);
    assert.equal(await get(`http://${ip}:8080/`), undefined, 'nothing answers once it is gone');
    assert.deepEqual(await leftoverMounts(node.ctrd), []);
    return vm;
  } finally {
    await new Promise((r) => seen.close(r));
    await node.cri.stopPodSandbox(id).catch(() => undefined);
    await node.cri.removePodSandbox(id).catch(() => undefined);
  }
}

/** A pod on the CNI network (not the node's) with `annotations`. */
function podOnNetwork(name: string, annotations: Record<string, string>): PodConfig {
  return {
    metadata: { name, uid: `uid-${name}`, namespace: 'default' },
    log_directory: join(node.ctrd.dir, 'logs', name),
    annotations: { 'forkd.dev/ports': '8080', ...annotations },
  };
}

test("a pod forked from a network nat snapshot: the guest's HTTP server answers on the pod IP, and its traffic leaves from that IP", async (t) => {
  await Snapshot.create({
    url: node.daemon.url,
    tag: 'pod-web',
    image: 'busybox',
    network: 'nat',
    warm: ['mkdir -p /www && echo hello-from-the-guest > /www/index.html'],
  });
  const pod = podOnNetwork('web', { 'forkd.dev/snapshot': 'pod-web' });
  assert.equal((await servesOnPodIp(t, pod, node.ctrd.image))?.snapshot, 'pod-web');
});

test("a pod without a snapshot, its VM made from its container's image, is on the pod's network the same way", async (t) => {
  await node.ctrd.importImage(WEB_IMAGE, { '/www/index.html': 'hello-from-the-guest\n' }, 'k8s.io');
  const vm = await servesOnPodIp(t, podOnNetwork('imgweb', {}), WEB_IMAGE);
  assert.match(vm?.image ?? '', /^rootfs-[0-9a-f]{56}$/, "the pod's VM ran the container's image");
  assert.match(vm?.snapshot ?? '', /^boot-[0-9a-f]{16}$/, "a fork of the image's boot snapshot");
});

test('a start from an image into a path that is no network namespace is refused, leaving nothing', async () => {
  const before = (await Sandbox.list({ url: node.daemon.url })).length;
  await assert.rejects(
    Sandbox.create({ url: node.daemon.url, image: 'busybox', netns: '/run/netns/forkd-test-none' }),
    (e: unknown) => {
      assert.ok(isForkdError(e, 'bad_request'));
      assert.match(e.message, /no network namespace at \/run\/netns\/forkd-test-none/);
      return true;
    },
  );
  assert.equal((await Sandbox.list({ url: node.daemon.url })).length, before);
});
