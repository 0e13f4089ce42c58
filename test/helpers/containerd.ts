/**
 * A private containerd for the shim's end-to-end tests: its own socket, root, state and
 * FIFO directories under one temp dir (never the host's containerd or /run/containerd),
 * `containerd-shim-forkd-v2` on its PATH as a wrapper of the built shim, FORKD_URL pointing
 * the shim at the test's daemon. `stop` ends it by pid, then any shim it left (by pid, found
 * by its command line naming this containerd), and removes the dir.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { shQuote } from '../../src/util/shell-words.js';
import type { CliResult } from './cli.js';

const SHIM = join(process.cwd(), 'dist', 'src', 'shim', 'main.js');
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
  /** The bundle directory of task `id` in namespace `default`. */
  bundle(id: string): string;
  /** Run `ctr --address … ARGS…` with `input` on its stdin, then end of file. */
  ctr(args: string[], input?: string): Promise<CliResult>;
  /** Run `ctr ARGS…` on a terminal of its own (`script`), as `ctr run -t` needs one. */
  ctrOnTerminal(args: string[]): Promise<CliResult>;
  /** Start `ctr ARGS…` and keep it running (`ctr events`); the returned stop ends it. */
  ctrBackground(args: string[]): { output(): string; stop(): Promise<void> };
  /** containerd's log, for failure messages. */
  output(): string;
  /** Stop containerd and start it again on the same dirs; running shims stay up. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export async function startContainerd(forkdUrl: string): Promise<Containerd> {
  // Short: the shim's socket is DIR/s/<64 hex> and must stay under 106 bytes.
  const dir = await mkdtemp('/tmp/forkd-ctrd-');
  const bin = join(dir, 'bin');
  const rootfs = join(dir, 'rootfs');
  const fifoDir = join(dir, 'fifo');
  await Promise.all([bin, rootfs, fifoDir].map((d) => mkdir(d)));
  const shim = join(bin, 'containerd-shim-forkd-v2');
  await writeFile(shim, `#!/bin/sh\nexec ${process.execPath} ${SHIM} "$@"\n`);
  await chmod(shim, 0o755);
  const address = join(dir, 'c.sock');
  await writeFile(
    join(dir, 'config.toml'),
    [
      'version = 2',
      `root = "${dir}/root"`,
      `state = "${dir}/state"`,
      'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
      '[grpc]',
      `  address = "${address}"`,
      '[plugins."io.containerd.internal.v1.opt"]',
      `  path = "${dir}/opt"`,
      '',
    ].join('\n'),
  );
  const env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, FORKD_URL: forkdUrl };
  let log = '';
  const launch = () => {
    const child = spawn('containerd', ['--config', join(dir, 'config.toml')], {
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
    bundle: (id) => join(dir, 'state', 'io.containerd.runtime.v2.task', 'default', id),
    ctr,
    ctrOnTerminal: (args) =>
      run('script', [
        '-qec',
        ['ctr', '--address', address, ...args].map(shQuote).join(' '),
        '/dev/null',
      ]),
    ctrBackground: (args) => background('ctr', ['--address', address, ...args]),
    output: () => log,
    restart: async () => {
      await end(child);
      child = launch();
      await waitReady(child, ctr, () => log);
    },
    stop: async () => {
      await end(child);
      await sweep(dir);
    },
  };
  try {
    await waitReady(child, ctr, () => log);
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

/** Kill what is left of this containerd (its shims, by pid) and remove its directory. */
async function sweep(dir: string): Promise<void> {
  for (const pid of await processesNaming(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  await rm(dir, { recursive: true, force: true });
}
