/**
 * A private containerd for the shim's end-to-end tests: its own socket, root, state and
 * FIFO directories under one temp dir (never the host's containerd or /run/containerd),
 * `containerd-shim-forkd-v2` on its PATH as a wrapper of the built shim, FORKD_URL pointing
 * the shim at the test's daemon. With `cri`, its CRI plugin is on, with the runtime handler
 * `forkd` (`pod_annotations = ["forkd.dev/*"]`), CNI config from the test's dir, and a
 * sandbox (pause) image the test builds and imports — nothing is pulled. `stop` ends it by
 * pid, then any shim it left (by pid, found by its command line naming this containerd),
 * unmounts what its CRI plugin left mounted, and removes the dir.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import {
  chmod,
  copyFile,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { shQuote } from '../../src/util/shell-words.js';
import { Snapshot } from '@forkd/sdk';
import { layerFromDir, ociImage, writeDockerSave } from '../e2e/images/registry.js';
import type { CliResult } from './cli.js';

const SHIM = join(process.cwd(), 'dist', 'src', 'shim', 'main.js');
/** Debian's static busybox (busybox-static), the test image's only binary. */
const BUSYBOX = '/bin/busybox';
const READY_MS = 30_000;
const STOP_MS = 10_000;
const OUTPUT_KEEP = 256 * 1024;
/** The longest one ctr call may take (a cold boot under TCG on a busy host fits). */
const CTR_MS = 180_000;

export interface Containerd {
  dir: string;
  /** Its gRPC socket (`ctr --address`). */
  address: string;
  /** An empty directory for `ctr run --rootfs` (the sandbox brings its own root). */
  rootfs: string;
  /** Where ctr makes its IO FIFOs (`--fifo-dir`). */
  fifoDir: string;
  /** The bundle directory of task `id` in namespace `ns` (`default`; CRI's is `k8s.io`). */
  bundle(id: string, ns?: string): string;
  /** Run `ctr --address … ARGS…` with `input` on its stdin, then end of file. */
  ctr(args: string[], input?: string): Promise<CliResult>;
  /** Run `ctr ARGS…` on a terminal of its own (`script`), as `ctr run -t` needs one. */
  ctrOnTerminal(args: string[]): Promise<CliResult>;
  /** Start `ctr ARGS…` and keep it running (`ctr events`); the returned stop ends it. */
  ctrBackground(args: string[]): { output(): string; stop(): Promise<void> };
  /** With `cri`: the image the test's pods use, also the sandbox (pause) image. */
  image: string;
  /**
   * Build a busybox image (test/helpers/containerd.ts importTestImage) with `files` added
   * (path → content) and import it as `ref` into namespace `ns` (`default`).
   */
  importImage(ref: string, files: Record<string, string>, ns?: string): Promise<void>;
  /** With `cri`: where CRI reads CNI network configs. */
  cniConfDir: string;
  /** containerd's log, for failure messages. */
  output(): string;
  /** Stop containerd and start it again on the same dirs; running shims stay up. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export interface ContainerdOptions {
  /** Turn the CRI plugin on, with the `forkd` runtime handler (default off). */
  cri?: boolean;
  /**
   * Write the forkd runtime's config with this command (`CMD CONFIG_FILE`) instead of the
   * helper's own stanza: the install script under test.
   */
  configure?: (configFile: string) => Promise<void>;
  /**
   * A CNI network for pods that are not on the node's network: Debian's `bridge` plugin on
   * a bridge of this name (made in the host namespace, deleted by `stop`), `host-local`
   * addresses from `subnet`, its state under the helper's dir.
   */
  cni?: { bridge: string; subnet: string };
}

/** The image the CRI tests' pods use (built and imported by the helper, never pulled). */
export const CRI_IMAGE = 'localhost/forkd-test-pod:1';

/** The CRI plugin's config, with the `forkd` runtime handler unless `configure` adds it. */
function criConfig(dir: string, withRuntime: boolean): string[] {
  const cri = '[plugins."io.containerd.grpc.v1.cri"]';
  return [
    cri,
    `  sandbox_image = "${CRI_IMAGE}"`,
    '  netns_mounts_under_state_dir = true',
    // No oom_score_adj below containerd's own: lowering it failed here (runc's pause
    // container could not start: "can't get final child's PID from pipe").
    '  restrict_oom_score_adj = true',
    '  stream_server_address = "127.0.0.1"',
    '  stream_server_port = "0"',
    '  [plugins."io.containerd.grpc.v1.cri".cni]',
    '    bin_dir = "/usr/lib/cni"',
    `    conf_dir = "${dir}/cni"`,
    ...(withRuntime
      ? [
          // Naming one runtime replaces containerd's default table: runc goes back in.
          '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
          '  runtime_type = "io.containerd.runc.v2"',
          '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.forkd]',
          '  runtime_type = "io.containerd.forkd.v2"',
          '  pod_annotations = ["forkd.dev/*"]',
        ]
      : []),
  ];
}

export async function startContainerd(
  forkdUrl: string,
  opts: ContainerdOptions = {},
): Promise<Containerd> {
  // Short: the shim's socket is DIR/s/<64 hex> and must stay under 106 bytes.
  const dir = await mkdtemp('/tmp/forkd-ctrd-');
  const bin = join(dir, 'bin');
  const rootfs = join(dir, 'rootfs');
  const fifoDir = join(dir, 'fifo');
  const cniConfDir = join(dir, 'cni');
  await Promise.all([bin, rootfs, fifoDir, cniConfDir].map((d) => mkdir(d)));
  const shim = join(bin, 'containerd-shim-forkd-v2');
  await writeFile(shim, `#!/bin/sh\nexec ${process.execPath} ${SHIM} "$@"\n`);
  await chmod(shim, 0o755);
  const address = join(dir, 'c.sock');
  const configFile = join(dir, 'config.toml');
  await writeFile(
    configFile,
    [
      'version = 2',
      `root = "${dir}/root"`,
      `state = "${dir}/state"`,
      opts.cri ? 'disabled_plugins = []' : 'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
      '[grpc]',
      `  address = "${address}"`,
      '[plugins."io.containerd.internal.v1.opt"]',
      `  path = "${dir}/opt"`,
      ...(opts.cri ? criConfig(dir, !opts.configure) : []),
      '',
    ].join('\n'),
  );
  if (opts.configure) await opts.configure(configFile);
  if (opts.cni) await writeCniConfig(cniConfDir, join(dir, 'cni-ipam'), opts.cni);
  const env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, FORKD_URL: forkdUrl };
  let log = '';
  const launch = () => {
    const child = spawn('containerd', ['--config', configFile], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (c: Buffer) => (log = (log + c.toString('utf8')).slice(-OUTPUT_KEEP));
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    return child;
  };
  let child = launch();
  const ctr = (args: string[], input?: string) =>
    run('ctr', ['--address', address, ...args], input);
  const c: Containerd = {
    dir,
    address,
    rootfs,
    fifoDir,
    image: CRI_IMAGE,
    cniConfDir,
    bundle: (id, ns = 'default') => join(dir, 'state', 'io.containerd.runtime.v2.task', ns, id),
    ctr,
    ctrOnTerminal: (args) =>
      run('script', [
        '-qec',
        ['ctr', '--address', address, ...args].map(shQuote).join(' '),
        '/dev/null',
      ]),
    ctrBackground: (args) => background('ctr', ['--address', address, ...args]),
    importImage: (ref, files, ns = 'default') => importTestImage(dir, ctr, { ref, ns, files }),
    output: () => log,
    restart: async () => {
      await end(child);
      child = launch();
      await waitReady(child, ctr, () => log);
    },
    stop: async () => {
      await end(child);
      await sweep(dir);
      if (opts.cni) await run('ip', ['link', 'del', opts.cni.bridge]); // absent: nothing to do
    },
  };
  try {
    await waitReady(child, ctr, () => log);
    if (opts.cri) await importTestImage(dir, ctr, { ref: CRI_IMAGE, ns: 'k8s.io', files: {} });
  } catch (e) {
    await c.stop();
    throw e;
  }
  return c;
}

async function waitReady(
  child: ChildProcess,
  ctr: (args: string[]) => Promise<CliResult>,
  log: () => string,
): Promise<void> {
  const deadline = Date.now() + READY_MS;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`containerd exited: ${log()}`);
    if ((await ctr(['version'])).code === 0) return;
    if (Date.now() > deadline) throw new Error(`containerd not ready in 30 s: ${log()}`);
    await sleep(200);
  }
}

function run(cmd: string, args: string[], input?: string): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    // A hung call fails its test (SIGTERM, then code null) instead of hanging the file.
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], timeout: CTR_MS });
    child.stdin.on('error', () => undefined);
    child.stdin.end(input ?? '');
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') }),
    );
  });
}

function background(cmd: string, args: string[]) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => (out += d.toString('utf8')));
  return {
    output: () => out,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await gone;
    },
  };
}

/** Pids of processes whose command line names `dir` (the shims of this containerd). */
async function processesNaming(dir: string): Promise<number[]> {
  const pids: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    const cmd = await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '');
    if (cmd.includes(`${dir}/`)) pids.push(Number(name));
  }
  return pids;
}

/** End containerd by its pid (SIGTERM, SIGKILL after 10 s); its shims keep running. */
async function end(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_MS);
  await gone;
  clearTimeout(timer);
}

/**
 * A test image, built here from the host's static busybox (Debian's busybox-static, a
 * dependency of setup.sh): `/bin/busybox` with `sh`, `sleep`, `true`, `echo` and `cat`,
 * `/pause`, which sleeps — enough for runc to run a pod of it (the bench's runc column) —
 * and `files` (a script, starting with `#!`, executable). Saved as `docker save` does and imported into namespace `ns` with ctr — from
 * loopback only, nothing pulled. The CRI tests' pods use one (CRI_IMAGE); a pod forked from
 * a snapshot runs the VM's root, not the image's.
 */
async function importTestImage(
  dir: string,
  ctr: (args: string[]) => Promise<CliResult>,
  image: { ref: string; ns: string; files: Record<string, string> },
): Promise<void> {
  const work = await mkdtemp(join(dir, 'image-'));
  const root = join(work, 'root');
  await mkdir(join(root, 'bin'), { recursive: true });
  await copyFile(BUSYBOX, join(root, 'bin', 'busybox'));
  await chmod(join(root, 'bin', 'busybox'), 0o755);
  for (const applet of ['sh', 'sleep', 'true', 'echo', 'cat']) {
    await symlink('busybox', join(root, 'bin', applet));
  }
  await writeFile(join(root, 'pause'), '#!/bin/sh\nexec sleep 2147483647\n', { mode: 0o755 });
  for (const [path, content] of Object.entries(image.files)) {
    await mkdir(dirname(join(root, path)), { recursive: true });
    // A script (`#!`) is a command of the image: executable.
    await writeFile(join(root, path), content, { mode: content.startsWith('#!') ? 0o755 : 0o644 });
  }
  const layer = await layerFromDir(join(work, 'root'), join(work, 'layer'), 'none');
  const img = ociImage([layer], { Cmd: ['/pause'], Env: ['PATH=/usr/sbin:/usr/bin:/sbin:/bin'] });
  await writeDockerSave(join(work, 'save'), img, image.ref);
  const tar = join(work, 'image.tar');
  const t = await run('tar', ['-C', join(work, 'save'), '-cf', tar, '.']);
  if (t.code !== 0) throw new Error(`tar of the test image: ${t.stderr}`);
  const r = await ctr(['-n', image.ns, 'images', 'import', tar]);
  if (r.code !== 0) throw new Error(`ctr images import: ${r.stderr}`);
}

/** The CNI network config: a bridge with a gateway on the host end, addresses from a subnet. */
async function writeCniConfig(
  confDir: string,
  dataDir: string,
  net: { bridge: string; subnet: string },
): Promise<void> {
  const conf = {
    cniVersion: '0.4.0',
    name: 'forkd-test',
    plugins: [
      {
        type: 'bridge',
        bridge: net.bridge,
        isGateway: true,
        ipMasq: false,
        ipam: { type: 'host-local', ranges: [[{ subnet: net.subnet }]], dataDir },
      },
    ],
  };
  await writeFile(join(confDir, '10-forkd-test.conflist'), JSON.stringify(conf));
}

/** Mount points under `dir` (CRI's shm and netns pins), deepest first. */
async function mountsUnder(dir: string): Promise<string[]> {
  const mounts = await readFile('/proc/self/mounts', 'utf8');
  return mounts
    .split('\n')
    .map((l) => l.split(' ')[1] ?? '')
    .filter((m) => m.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
}

/**
 * Kill what is left of this containerd (its shims, by pid), unmount what its CRI plugin
 * left mounted, and remove its directory.
 */
async function sweep(dir: string): Promise<void> {
  for (const pid of await processesNaming(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const m of await mountsUnder(dir)) await run('umount', ['-l', m]);
  await rm(dir, { recursive: true, force: true });
}

/** Mount points a CRI containerd left under its directory (a test asserts none). */
export const leftoverMounts = (c: Containerd) => mountsUnder(c.dir);

/**
 * The shim tests' warm snapshot: busybox, no NIC, a file (`/root/marker`: "warmed") and a
 * process (`sleep 100000`) made at warm-up, so a task can tell it was forked from it.
 */
export async function createWarmSnapshot(url: string, tag: string): Promise<void> {
  await Snapshot.create({
    url,
    tag,
    image: 'busybox',
    network: 'none',
    warm: ['echo warmed > /root/marker'],
    start: ['sleep 100000'],
  });
}
