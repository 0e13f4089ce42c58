/**
 * forkd under Kubernetes' runtime interface (docs/kubernetes.md "Measured"): a private
 * containerd with the `forkd` and `runc` runtime handlers, driven by the tests' CRI client
 * as a kubelet would. Measured:
 *  - RunPodSandbox → CreateContainer → StartContainer done, one pod after another, for a
 *    pod forked from a warm snapshot, a pod without one (its VM made from the container's
 *    image: the first pod imports it, the next find it), and the same calls under runc
 *    (Debian's, containerd's default runtime) with the test image;
 *  - the node's one shim process: its RSS with 1, 5 and 10 pods running, per pod;
 *  - N pods at once (default 20): time until all run, memory per pod (QEMU RSS and PSS, and
 *    the shim's share);
 *  - ExecSync of `true` against `forkd exec`'s equivalent (the SDK on the same sandbox).
 * Usage: node dist/bench/cri.js [SEQUENTIAL=20] [COLD=20] [AT_ONCE=20] [PARTS]
 * PARTS (default all): a comma list of `shim` (the shim's RSS, memory, exec), `warm`,
 * `runc`, `cold`, `burst` (the pods at once), to run a part again alone.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { Sandbox, Snapshot } from '@forkd/sdk';
import { detectAccel } from '../src/drivers/qemu/accel.js';
import { startContainerd, type Containerd } from '../test/helpers/containerd.js';
import { CriClient, NAMESPACE, type PodConfig } from '../test/helpers/cri.js';
import { startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { summary, timeSequential as timed } from './stats.js';

const SEQUENTIAL = Number(process.argv[2] ?? 20);
const COLD = Number(process.argv[3] ?? 20);
const AT_ONCE = Number(process.argv[4] ?? 20);
const EXECS = 20;
const TAG = 'bench-warm';
/** Pod counts at which the shim's RSS is read. */
const SHIM_AT = [1, 5, 10];
const PARTS = (process.argv[5] ?? 'shim,warm,runc,cold,burst').split(',');

/** A /proc/PID/status or smaps_rollup field in MiB. */
async function mib(pid: number, key: string): Promise<number> {
  const text =
    (await readFile(`/proc/${pid}/status`, 'utf8')) +
    (await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => ''));
  return Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN) / 1024;
}

const load = () =>
  `load ${loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`;

type Mode = 'warm' | 'cold' | 'runc';

/** Pods of one containerd: started as a kubelet starts them, removed with nothing left. */
class Pods {
  private n = 0;
  readonly running: { id: string; container: string }[] = [];

  constructor(
    private readonly ctrd: Containerd,
    private readonly cri: CriClient,
  ) {}

  /** RunPodSandbox → CreateContainer → StartContainer of a pod in `mode`. */
  async start(mode: Mode): Promise<{ id: string; container: string }> {
    const i = this.n++;
    const pod: PodConfig = {
      metadata: { name: `b${i}`, uid: `uid-b${i}`, namespace: 'bench' },
      log_directory: join(this.ctrd.dir, 'logs', `b${i}`),
      annotations: mode === 'warm' ? { 'forkd.dev/snapshot': TAG } : {},
      linux: { security_context: { namespace_options: { network: NAMESPACE.node } } },
    };
    const id = await this.cri.runPodSandbox(pod, mode === 'runc' ? 'runc' : 'forkd');
    const started = { id, container: '' };
    this.running.push(started);
    started.container = await this.cri.createContainer(
      id,
      {
        metadata: { name: 'app' },
        image: { image: this.ctrd.image },
        command: ['sleep', '100000'],
      },
      pod,
    );
    await this.cri.startContainer(started.container);
    return started;
  }

  async remove(id: string): Promise<void> {
    await this.cri.stopPodSandbox(id).catch(() => undefined);
    await this.cri.removePodSandbox(id).catch(() => undefined);
    this.running.splice(
      this.running.findIndex((p) => p.id === id),
      1,
    );
  }

  async removeAll(): Promise<void> {
    for (const { id } of [...this.running]) await this.remove(id);
  }

  /** The node's shim: the pid in any running pod's bundle. */
  async shimPid(): Promise<number> {
    const id = this.running[0]?.id ?? '';
    return Number(await readFile(join(this.ctrd.bundle(id, 'k8s.io'), 'shim.pid'), 'utf8'));
  }
}

/**
 * Time `n` pods of `mode`, one after another, each removed before the next; `seen` gets
 * each pod's VM (read after its time is taken) while it runs.
 */
async function sequence(
  pods: Pods,
  mode: Mode,
  n: number,
  seen?: (id: string) => Promise<void>,
): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const { id } = await pods.start(mode);
    samples.push(performance.now() - t0);
    await seen?.(id);
    await pods.remove(id);
  }
  return samples;
}

/** The QEMU of pod `id`: its RSS and PSS in MiB. */
async function qemuOf(url: string, id: string): Promise<{ rss: number; pss: number }> {
  const [vm] = await Sandbox.list({ url, label: `containerd.io/id=${id}`, state: 'running' });
  if (!vm?.pid) return { rss: NaN, pss: NaN };
  return { rss: await mib(vm.pid, 'VmRSS'), pss: await mib(vm.pid, 'Pss') };
}

async function main(): Promise<void> {
  const { accel, reason } = await detectAccel();
  console.log(
    `CRI bench: accel ${accel} (${reason}), ${new Date().toISOString()}, ${load()} at start`,
  );
  const home = await makeBenchHome(['busybox']);
  home.env.FORKD_POD_SNAPSHOTS = TAG;
  const daemon = await startDaemon(home);
  const ctrd = await startContainerd(daemon.url, { cri: true });
  const cri = new CriClient(ctrd.address);
  const pods = new Pods(ctrd, cri);
  try {
    await Snapshot.create({
      url: daemon.url,
      tag: TAG,
      image: 'busybox',
      network: 'none',
      start: ['sleep 100000'],
    });

    // The shim's RSS as pods are added: warm pods kept running, read at 1, 5 and 10.
    const kept: number[] = [];
    for (let i = 1; PARTS.includes('shim') && i <= Math.max(...SHIM_AT); i++) {
      const t0 = performance.now();
      await pods.start('warm');
      kept.push(performance.now() - t0);
      if (!SHIM_AT.includes(i)) continue;
      const rss = await mib(await pods.shimPid(), 'VmRSS');
      console.log(
        `the node's shim with ${i} pod(s): RSS ${rss.toFixed(1)} MiB, ${(rss / i).toFixed(1)} MiB per pod (${load()})`,
      );
    }
    if (PARTS.includes('shim')) await shimPart(daemon.url, pods, cri);
    if (PARTS.includes('warm')) {
      const warm = [...kept, ...(await sequence(pods, 'warm', SEQUENTIAL - kept.length))];
      console.log(
        `RunPodSandbox → StartContainer, forked from a warm snapshot: ${summary(warm)} (${load()})`,
      );
    }
    if (PARTS.includes('runc')) {
      const runc = await sequence(pods, 'runc', SEQUENTIAL);
      console.log(`RunPodSandbox → StartContainer, runc (Debian's): ${summary(runc)} (${load()})`);
    }
    if (PARTS.includes('cold')) {
      // No annotation: the VM is made at the first container's start from its image. The
      // first pod imports it (a cache image, its boot snapshot captured); the next fork that.
      let forks = 0;
      const [first = NaN, ...cached] = await sequence(pods, 'cold', COLD, async (id) => {
        const [vm] = await Sandbox.list({ url: daemon.url, label: `containerd.io/id=${id}` });
        if (vm?.snapshot?.startsWith('boot-')) forks++;
      });
      const boot = `${forks} of ${COLD} forked its boot snapshot, the rest booted`;
      console.log(
        `RunPodSandbox → StartContainer, no annotation, the image's first pod (import): ${first.toFixed(0)} ms (${load()})`,
      );
      console.log(
        `RunPodSandbox → StartContainer, no annotation, image cached (${boot}): ${summary(cached)} (${load()})`,
      );
    }
    if (PARTS.includes('burst')) await burst(daemon.url, pods);
  } finally {
    await pods.removeAll();
    cri.close();
    await ctrd.stop();
    await stopDaemon(daemon);
    await home.cleanup();
  }
}

/** The running pods' QEMU memory, then ExecSync against the SDK's exec; removes them. */
async function shimPart(url: string, pods: Pods, cri: CriClient): Promise<void> {
  const qemu = await Promise.all(pods.running.map((p) => qemuOf(url, p.id)));
  console.log(
    `per pod, QEMU RSS: ${summary(
      qemu.map((q) => q.rss),
      'MiB',
    )}`,
  );
  console.log(
    `per pod, QEMU PSS (shared pages split): ${summary(
      qemu.map((q) => q.pss),
      'MiB',
    )}`,
  );

  const last = pods.running.at(-1);
  const exec = await timed(EXECS, () => cri.execSync(last?.container ?? '', ['true'], 60));
  const [vm] = await Sandbox.list({ url: url, label: `containerd.io/id=${last?.id}` });
  const sbx = await Sandbox.connect(vm?.id ?? '', { url: url });
  const direct = await timed(EXECS, () => sbx.commands.run(['true']));
  console.log(`ExecSync \`true\`: ${summary(exec)} (${load()})`);
  console.log(`forkd exec equivalent (SDK commands.run, same sandbox): ${summary(direct)}`);
  await pods.removeAll();
}

/** AT_ONCE warm pods started together: time until all run, memory per pod. */
async function burst(url: string, pods: Pods): Promise<void> {
  const t0 = performance.now();
  const all = await Promise.all(Array.from({ length: AT_ONCE }, () => pods.start('warm')));
  console.log(
    `${AT_ONCE} warm pods at once: all running after ${((performance.now() - t0) / 1000).toFixed(1)} s (${load()})`,
  );
  const many = await Promise.all(all.map((p) => qemuOf(url, p.id)));
  const shim = await mib(await pods.shimPid(), 'VmRSS');
  const pss = many.reduce((s, q) => s + q.pss, 0) / many.length;
  console.log(
    `with ${AT_ONCE} pods: QEMU PSS ${pss.toFixed(1)} MiB per pod (RSS ${summary(
      many.map((q) => q.rss),
      'MiB',
    )}); the shim ${shim.toFixed(1)} MiB RSS, ${(shim / AT_ONCE).toFixed(1)} MiB per pod; pod = ${(pss + shim / AT_ONCE).toFixed(1)} MiB`,
  );
}

await main();
