/**
 * forkd under Kubernetes' runtime interface (docs/kubernetes.md "Measured"): a private
 * containerd with the `forkd` runtime handler, driven by the tests' CRI client as a kubelet
 * would. For N pods (default 5), one after another: RunPodSandbox (a fork of a warm
 * snapshot) → CreateContainer → StartContainer, until the container runs; then the memory
 * of each pod (its QEMU's RSS and PSS) and of the pod's shim; then ExecSync of `true`
 * against `forkd exec`'s equivalent (the SDK's commands.run on the same sandbox).
 * Usage: node dist/bench/cri.js [N]
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Sandbox, Snapshot } from '@forkd/sdk';
import { detectAccel } from '../src/drivers/qemu/accel.js';
import { startContainerd } from '../test/helpers/containerd.js';
import { CriClient, NAMESPACE, type PodConfig } from '../test/helpers/cri.js';
import { startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { summary, timeSequential as timed } from './stats.js';

const N = Number(process.argv[2] ?? 5);
const EXECS = 20;
const TAG = 'bench-warm';

/** A /proc/PID/status or smaps_rollup field in MiB. */
async function mib(pid: number, key: string): Promise<number> {
  const text =
    (await readFile(`/proc/${pid}/status`, 'utf8')) +
    (await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => ''));
  return Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN) / 1024;
}

async function main(): Promise<void> {
  const { accel, reason } = await detectAccel();
  console.log(
    `CRI: RunPodSandbox → container running, forked from a warm snapshot, n=${N} pods in sequence; accel ${accel} (${reason}), ${new Date().toISOString()}`,
  );
  const home = await makeBenchHome(['busybox']);
  home.env.FORKD_POD_SNAPSHOTS = TAG;
  const daemon = await startDaemon(home);
  const ctrd = await startContainerd(daemon.url, { cri: true });
  const cri = new CriClient(ctrd.address);
  const pods: string[] = [];
  try {
    await Snapshot.create({
      url: daemon.url,
      tag: TAG,
      image: 'busybox',
      network: 'none',
      start: ['sleep 100000'],
    });
    const podConfig = (i: number): PodConfig => ({
      metadata: { name: `b${i}`, uid: `uid-b${i}`, namespace: 'bench' },
      log_directory: join(ctrd.dir, 'logs', `b${i}`),
      annotations: { 'forkd.dev/snapshot': TAG },
      linux: { security_context: { namespace_options: { network: NAMESPACE.node } } },
    });
    let last = '';
    const start = await timed(N, async () => {
      const pod = podConfig(pods.length);
      const id = await cri.runPodSandbox(pod, 'forkd');
      pods.push(id);
      const c = await cri.createContainer(
        id,
        { metadata: { name: 'app' }, image: { image: ctrd.image }, command: ['sleep', '100000'] },
        pod,
      );
      await cri.startContainer(c);
      last = c;
    });
    console.log(`RunPodSandbox → StartContainer done: ${summary(start)}`);

    const qemu: number[] = [];
    const pss: number[] = [];
    const shim: number[] = [];
    for (const id of pods) {
      const [vm] = await Sandbox.list({ url: daemon.url, label: `containerd.io/id=${id}` });
      if (vm?.pid) qemu.push(await mib(vm.pid, 'VmRSS'));
      if (vm?.pid) pss.push(await mib(vm.pid, 'Pss'));
      const pid = Number(await readFile(join(ctrd.bundle(id, 'k8s.io'), 'shim.pid'), 'utf8'));
      shim.push(await mib(pid, 'VmRSS'));
    }
    console.log(`per pod, QEMU RSS: ${summary(qemu, 'MiB')}`);
    console.log(`per pod, QEMU PSS (shared pages split): ${summary(pss, 'MiB')}`);
    console.log(`per pod, its shim's RSS: ${summary(shim, 'MiB')}`);

    const exec = await timed(EXECS, () => cri.execSync(last, ['true'], 60));
    const [vm] = await Sandbox.list({ url: daemon.url, label: `containerd.io/id=${pods.at(-1)}` });
    const sbx = await Sandbox.connect(vm?.id ?? '', { url: daemon.url });
    const direct = await timed(EXECS, () => sbx.commands.run(['true']));
    console.log(`ExecSync \`true\`: ${summary(exec)}`);
    console.log(`forkd exec equivalent (SDK commands.run, same sandbox): ${summary(direct)}`);
  } finally {
    for (const id of pods) {
      await cri.stopPodSandbox(id).catch(() => undefined);
      await cri.removePodSandbox(id).catch(() => undefined);
    }
    cri.close();
    await ctrd.stop();
    await stopDaemon(daemon);
    await home.cleanup();
  }
}

await main();
