/**
 * containerd-shim-forkd-v2 under containerd's CRI plugin, driven as a kubelet drives it: a
 * CRI gRPC client (test/helpers/cri.ts) calls RunPodSandbox with `runtime_handler: forkd`,
 * CreateContainer, StartContainer, ExecSync, ContainerStatus, StopPodSandbox and
 * RemovePodSandbox on a private containerd whose CRI plugin has the `forkd` handler. A pod
 * is one forkd sandbox forked from a warm snapshot, or without one made at its first
 * container's start from that container's image; its containers are processes in it.
 * The pods' image is built and imported by the helper: nothing comes from the internet.
 */
import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Forkd, Sandbox, Snapshot } from '@forkd/sdk';
import type { DaemonProcess } from '../../helpers/daemon-process.js';
import { startCriNode, type CriNode } from '../../helpers/cri-node.js';
import {
  createWarmSnapshot,
  leftoverMounts,
  startContainerd,
  type Containerd,
} from '../../helpers/containerd.js';
import { pidAlive } from '../../../src/util/pid.js';
import {
  CONTAINER_STATE,
  CriClient,
  SANDBOX_STATE,
  NAMESPACE,
  type ContainerConfig,
  type PodConfig,
} from '../../helpers/cri.js';

const WARM = 'pod-warm';

let node: CriNode;
let daemon: DaemonProcess;
let ctrd: Containerd;
let cri: CriClient;

before(async () => {
  node = await startCriNode();
  ({ daemon, ctrd, cri } = node);
  await createWarmSnapshot(daemon.url, WARM);
});

after(() => node?.stop());

/** A pod on the node's network (pods on a CNI network: cri-network.test.ts) naming `annotations`. */
function podConfig(name: string, annotations: Record<string, string>): PodConfig {
  return {
    metadata: { name, uid: `uid-${name}`, namespace: 'default' },
    log_directory: join(ctrd.dir, 'logs', name),
    annotations,
    linux: { security_context: { namespace_options: { network: NAMESPACE.node } } },
  };
}

function container(name: string, command: string[], extra: Partial<ContainerConfig> = {}) {
  return {
    metadata: { name },
    image: { image: ctrd.image },
    command,
    log_path: `${name}.log`,
    ...extra,
  };
}

/** The running forkd sandboxes of the containerd task (or pod) `id`. */
function sandboxesOf(id: string) {
  return Sandbox.list({ url: daemon.url, label: `containerd.io/id=${id}`, state: 'running' });
}

async function until(what: string, check: () => Promise<boolean>, ms = 120_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms\n${ctrd.output()}`);
    await sleep(250);
  }
}

const INSTALL = join(process.cwd(), 'packaging', 'kubernetes', 'install.sh');

function runInstall(args: string[]) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn('sh', [INSTALL, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const readLog = (path: string) => readFile(path, 'utf8').catch(() => '');

test('a pod under runtime handler forkd: a fork of the warm snapshot whose containers log, exec and exit with their codes; stop and remove leave nothing', async (t) => {
  const pod = podConfig('p1', { 'forkd.dev/snapshot': WARM });
  let started = Date.now();
  const id = await cri.runPodSandbox(pod, 'forkd');
  t.diagnostic(`RunPodSandbox, forked from a warm snapshot: ${Date.now() - started} ms`);
  const [vm, ...more] = await sandboxesOf(id);
  assert.equal(vm?.snapshot, WARM, 'the pod is a fork of the snapshot its annotation names');
  assert.deepEqual(more, []);
  const shimPid = Number(await readFile(join(ctrd.bundle(id, 'k8s.io'), 'shim.pid'), 'utf8'));

  started = Date.now();
  const app = await cri.createContainer(
    id,
    container(
      'app',
      [
        'sh',
        '-c',
        'echo hello-from-pod; echo to-stderr >&2; echo "$GREETING" > /tmp/from-app; exec sleep 100000',
      ],
      {
        envs: [{ key: 'GREETING', value: 'hi-from-config' }],
      },
    ),
    pod,
  );
  await cri.startContainer(app);
  t.diagnostic(`CreateContainer + StartContainer: ${Date.now() - started} ms`);
  const appLog = join(pod.log_directory ?? '', 'app.log');
  await until('the container logs its lines to the CRI log file', async () => {
    const log = await readLog(appLog);
    return log.includes('stdout F hello-from-pod') && log.includes('stderr F to-stderr');
  });
  assert.equal((await cri.containerStatus(app)).state, CONTAINER_STATE.running);

  started = Date.now();
  const e = await cri.execSync(app, ['sh', '-c', 'cat /root/marker; echo "$GREETING"; exit 3'], 60);
  t.diagnostic(`ExecSync round trip: ${Date.now() - started} ms`);
  assert.deepEqual(e, { stdout: 'warmed\nhi-from-config\n', stderr: '', code: 3 });

  // A second container of the pod is a process in the same VM: it sees the first one's file.
  const job = await cri.createContainer(
    id,
    container('job', ['sh', '-c', 'cat /tmp/from-app; exit 7']),
    pod,
  );
  await cri.startContainer(job);
  await until(
    'the job exits',
    async () => (await cri.containerStatus(job)).state === CONTAINER_STATE.exited,
  );
  const status = await cri.containerStatus(job);
  assert.equal(status.exit_code, 7);
  assert.match(await readLog(join(pod.log_directory ?? '', 'job.log')), /stdout F hi-from-config/);
  assert.equal((await sandboxesOf(id)).length, 1, 'one pod, one forkd sandbox');

  started = Date.now();
  await cri.stopPodSandbox(id);
  await cri.removePodSandbox(id);
  t.diagnostic(`StopPodSandbox + RemovePodSandbox: ${Date.now() - started} ms`);
  assert.deepEqual(await cri.listPodSandbox(), []);
  assert.deepEqual(await cri.listContainers(), []);
  assert.deepEqual(await sandboxesOf(id), []);
  await until("the pod's shim exits", async () => !pidAlive(shimPid), 30_000);
  assert.deepEqual(await leftoverMounts(ctrd), []);
});

test('one shim process serves all the pods of the node: two pods, one shim, ended with the last', async (t) => {
  const pods = [
    podConfig('s1', { 'forkd.dev/snapshot': WARM }),
    podConfig('s2', { 'forkd.dev/snapshot': WARM }),
  ];
  const ids: string[] = [];
  for (const pod of pods) ids.push(await cri.runPodSandbox(pod, 'forkd'));
  const shimPids = await Promise.all(
    ids.map(async (id) =>
      Number(await readFile(join(ctrd.bundle(id, 'k8s.io'), 'shim.pid'), 'utf8')),
    ),
  );
  assert.equal(shimPids[0], shimPids[1], "the second pod is served by the first pod's shim");
  const rss = /VmRSS:\s+(\d+)/.exec(await readFile(`/proc/${shimPids[0]}/status`, 'utf8'))?.[1];
  t.diagnostic(`the node's shim with two pods: ${(Number(rss) / 1024).toFixed(1)} MiB RSS`);
  // Each pod is its own VM; a container of the second runs while the first is removed.
  const [one, two] = await Promise.all(ids.map(async (id) => (await sandboxesOf(id))[0]?.id));
  assert.ok(one && two && one !== two);
  const c = await cri.createContainer(
    ids[1] ?? '',
    container('c', ['sleep', '100000']),
    pods[1] as PodConfig,
  );
  await cri.startContainer(c);
  await cri.stopPodSandbox(ids[0] ?? '');
  await cri.removePodSandbox(ids[0] ?? '');
  const e = await cri.execSync(c, ['echo', 'still-served'], 60);
  assert.deepEqual(e, { stdout: 'still-served\n', stderr: '', code: 0 });
  await cri.stopPodSandbox(ids[1] ?? '');
  await cri.removePodSandbox(ids[1] ?? '');
  assert.deepEqual(await cri.listPodSandbox(), []);
  await until(
    "the node's shim exits after the last pod",
    async () => !pidAlive(shimPids[0] ?? 0),
    30_000,
  );
});

/** RunPodSandbox naming `snapshot` fails with an error matching `reason`, and leaves nothing. */
async function refused(name: string, snapshot: string, reason: RegExp): Promise<void> {
  await assert.rejects(
    cri.runPodSandbox(podConfig(name, { 'forkd.dev/snapshot': snapshot }), 'forkd'),
    (e: Error & { details?: string }) => {
      assert.match(e.details ?? e.message, reason);
      return true;
    },
  );
  assert.deepEqual(await cri.listPodSandbox(), []);
  const left = await Sandbox.list({
    url: daemon.url,
    label: 'containerd.io/namespace=k8s.io',
    state: 'running',
  });
  assert.deepEqual(left, []);
}

test("a snapshot outside the node's allow-list fails RunPodSandbox with the reason, never a cold boot", async () => {
  // `busybox-warm` is not `pod-*`: refused before anything starts.
  await refused(
    'denied',
    'busybox-warm',
    /may not fork snapshot "busybox-warm" \(allowed: pod-\*\).*snapshot_not_allowed/,
  );
});

test('an allowed snapshot the node does not have fails RunPodSandbox with the reason, leaving nothing', async () => {
  await refused('nosnap', 'pod-missing', /pod-missing/);
});

test('the install script run against a fresh containerd config makes the CRI path work', async () => {
  const fresh = await startContainerd(daemon.url, {
    cri: true,
    configure: async (config) => {
      const bin = join(config, '..', 'bin');
      const r = await runInstall(['--config', config, '--bin-dir', bin, '--no-restart']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /added the forkd runtime handler/);
      // Run twice, it changes nothing.
      const again = await runInstall(['--config', config, '--bin-dir', bin, '--no-restart']);
      assert.match(again.stdout, /names the forkd runtime already/);
    },
  });
  const client = new CriClient(fresh.address);
  try {
    const pod: PodConfig = {
      ...podConfig('installed', { 'forkd.dev/snapshot': WARM }),
      log_directory: join(fresh.dir, 'logs'),
    };
    const id = await client.runPodSandbox(pod, 'forkd');
    const c = await client.createContainer(
      id,
      {
        ...container('hello', ['sh', '-c', 'echo installed-ok; exec sleep 1000']),
        image: { image: fresh.image },
      },
      pod,
    );
    await client.startContainer(c);
    await until('the container logs', async () =>
      (await readLog(join(fresh.dir, 'logs', 'hello.log'))).includes('stdout F installed-ok'),
    );
    await client.stopPodSandbox(id);
    await client.removePodSandbox(id);
    assert.deepEqual(await sandboxesOf(id), []);
  } finally {
    client.close();
    await fresh.stop();
  }
});

/** An image with a file and a command busybox does not have, for pods without a snapshot. */
const ROOTED = 'localhost/forkd-test-rooted:1';
const MARKER = 'only in the rooted image';

/** The daemon's images made from containers' roots. */
async function rootImages() {
  const images = await new Forkd({ url: daemon.url }).images.list();
  return images.filter((i) => i.name.startsWith('rootfs-'));
}

/** Stop and remove pod `id`, whatever state it is in (a failed test's cleanup too). */
async function removePod(id: string): Promise<void> {
  await cri.stopPodSandbox(id).catch(() => undefined);
  await cri.removePodSandbox(id).catch(() => undefined);
}

test('a pod without a snapshot has no VM until its first container, whose image is then its root', async (t) => {
  // A pod stopped before any container: its sandbox container answered containerd without a VM.
  const empty = await cri.runPodSandbox(podConfig('novm', {}), 'forkd');
  try {
    assert.equal((await cri.podSandboxStatus(empty)).status.state, SANDBOX_STATE.ready);
    assert.deepEqual(await sandboxesOf(empty), [], 'no VM before a container names its image');
    await cri.stopPodSandbox(empty);
    assert.equal((await cri.podSandboxStatus(empty)).status.state, SANDBOX_STATE.notReady);
  } finally {
    await removePod(empty);
  }

  await ctrd.importImage(
    ROOTED,
    {
      '/etc/rooted': `${MARKER}\n`,
      '/bin/rooted-hello': '#!/bin/sh\necho "hello from $(cat /etc/rooted)"\n',
    },
    'k8s.io',
  );
  const pod = podConfig('rooted', {});
  const id = await cri.runPodSandbox(pod, 'forkd');
  try {
    await podOnItsImage(t, id, pod);
  } finally {
    await removePod(id);
  }
  assert.deepEqual(await sandboxesOf(id), []);
  assert.deepEqual(await leftoverMounts(ctrd), []);
  // Once the pod is gone, the prune removes its image, with its boot snapshots.
  const [image] = await rootImages();
  const pruned = await new Forkd({ url: daemon.url }).images.prune();
  assert.deepEqual(pruned.images, [image?.name]);
  assert.deepEqual(await rootImages(), []);
  const boots = (await Snapshot.list({ url: daemon.url })).filter((s) => s.image === image?.name);
  assert.deepEqual(boots, [], 'its boot snapshots went with it');
});

/**
 * Pod `id` (no snapshot): its first container makes the VM from its image, which has a
 * file and a command busybox lacks; a second container runs on that root; a prune keeps
 * the image meanwhile.
 */
async function podOnItsImage(t: TestContext, id: string, pod: PodConfig): Promise<void> {
  assert.deepEqual(await sandboxesOf(id), []);
  const app = await cri.createContainer(
    id,
    {
      ...container('app', ['sh', '-c', 'rooted-hello; exec sleep 100000']),
      image: { image: ROOTED },
    },
    pod,
  );
  let started = Date.now();
  await cri.startContainer(app);
  t.diagnostic(`StartContainer, the pod's VM made from the image: ${Date.now() - started} ms`);
  const appLog = join(pod.log_directory ?? '', 'app.log');
  await until('the container runs the command only its image has', async () =>
    (await readLog(appLog)).includes(`stdout F hello from ${MARKER}`),
  ).catch(async (e: Error) => {
    throw new Error(`${e.message}\napp.log:\n${await readLog(appLog)}`);
  });
  const e = await cri.execSync(app, ['cat', '/etc/rooted'], 60);
  assert.deepEqual(e, { stdout: `${MARKER}\n`, stderr: '', code: 0 });
  const [vm, ...more] = await sandboxesOf(id);
  assert.deepEqual(more, []);
  assert.match(vm?.image ?? '', /^rootfs-[0-9a-f]{56}$/, 'the VM runs the imported image');
  // Not a cold boot: the pod's labels name no snapshot, the allow-list does not apply.
  assert.match(vm?.snapshot ?? '', /^boot-[0-9a-f]{16}$/, "a fork of the image's boot snapshot");
  const [image, ...others] = await rootImages();
  assert.deepEqual(others, []);
  assert.equal(image?.name, vm?.image);
  assert.equal(image?.cache, true);

  // A second container (another image) is a process in the same VM, on the first one's root.
  const job = await cri.createContainer(id, container('job', ['cat', '/etc/rooted']), pod);
  started = Date.now();
  await cri.startContainer(job);
  t.diagnostic(`StartContainer, the pod's VM there: ${Date.now() - started} ms`);
  await until(
    'the job exits',
    async () => (await cri.containerStatus(job)).state === CONTAINER_STATE.exited,
  );
  assert.equal((await cri.containerStatus(job)).exit_code, 0);
  assert.match(await readLog(join(pod.log_directory ?? '', 'job.log')), /stdout F only in/);
  assert.deepEqual((await sandboxesOf(id)).length, 1, 'one pod, one VM');
  // In use, the image is kept by a prune.
  assert.deepEqual((await new Forkd({ url: daemon.url }).images.prune()).images, []);
}
