/**
 * A real `forkd daemon` for end-to-end tests: the built CLI as a child process on a test
 * home's FORKD_HOME, ready once /healthz answers, stopped by its pid (SIGTERM, then SIGKILL
 * if it does not exit) so a failing test never leaves it running; `daemonForFile` gives a
 * test file one on a home of its own, and removes both after the file's tests.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { after, before } from 'node:test';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Forkd, Sandbox } from '@forkd/sdk';
import { CLI } from './cli.js';
import { makeTestHome, type TestHome } from './home.js';

const OUTPUT_KEEP = 256 * 1024;
/** Measured: 11 s from spawn to listening at load 20 on 2 cores; a quiet host takes ~1 s. */
const READY_MS = 90_000;
const STOP_MS = 15_000;

export interface DaemonProcess {
  /** `unix:` URL of its socket, for the SDK and the CLI's FORKD_URL. */
  url: string;
  pid: number;
  /** Settles when the process has exited (killed, crashed or stopped). */
  exited: Promise<void>;
  /** Its log (stdout and stderr), for failure messages. */
  output(): string;
  /** SIGTERM and wait; SIGKILL after 15 s. Safe to call twice. */
  stop(): Promise<void>;
}

/**
 * Start `forkd daemon ARGS…` on `home` and wait until it answers; `asUid` runs it as that
 * user (and group) with no supplementary groups, through setpriv, and `netns` in that
 * network namespace (a path), through nsenter (the mount namespace stays the host's); the
 * pid stays the daemon's.
 */
export async function startDaemon(
  home: TestHome,
  args: string[] = [],
  asUid?: number,
  netns?: string,
): Promise<DaemonProcess> {
  const argv = [CLI, 'daemon', ...args];
  const drop =
    asUid === undefined ? [] : [`--reuid=${asUid}`, `--regid=${asUid}`, '--clear-groups'];
  const enter = netns === undefined ? [] : ['nsenter', `--net=${netns}`, '--'];
  const cmd = [
    ...enter,
    ...(asUid === undefined ? [] : ['setpriv', ...drop, '--']),
    process.execPath,
    ...argv,
  ];
  const child = spawn(cmd[0]!, cmd.slice(1), { env: home.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (chunk: Buffer) => (output = (output + chunk.toString('utf8')).slice(-OUTPUT_KEEP));
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const url = `unix:${join(home.dir, 'run', 'forkd.sock')}`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const daemon: DaemonProcess = {
    url,
    pid: child.pid ?? -1,
    exited,
    output: () => output,
    stop: () => stop(child),
  };
  try {
    await waitReady(child, url, () => output);
  } catch (e) {
    await daemon.stop();
    throw e;
  }
  return daemon;
}

const exited = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null;

async function waitReady(child: ChildProcess, url: string, output: () => string): Promise<void> {
  const forkd = new Forkd({ url });
  const deadline = Date.now() + READY_MS;
  for (;;) {
    if (exited(child)) {
      throw new Error(`forkd daemon exited (${child.exitCode ?? child.signalCode}): ${output()}`);
    }
    try {
      // A loaded host (2 cores, several TCG guests) can take seconds per answer.
      await forkd.health({ signal: AbortSignal.timeout(5000) });
      return;
    } catch {
      if (Date.now() > deadline)
        throw new Error(`forkd daemon not ready in ${READY_MS / 1000} s: ${output()}`);
      await sleep(100);
    }
  }
}

async function stop(child: ChildProcess): Promise<void> {
  if (exited(child) || child.pid === undefined) return;
  const gone = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_MS);
  await gone;
  clearTimeout(timer);
}

/** The home and daemon of a test file ({@link daemonForFile}), set before its tests run. */
export interface FileDaemon {
  readonly home: TestHome;
  readonly daemon: DaemonProcess;
}

/**
 * A daemon for the tests of one file: a fresh test home made ready by `prepare` (images, a
 * private guest, a test's own servers; what it returns is added to the daemon's arguments)
 * and `forkd daemon` on it, started before the file's tests. After them every sandbox it
 * still runs is killed, the daemon stopped, `cleanup` run and the home removed. One hook
 * each: Node 20 does not wait for one top-level `before` to end before starting the next.
 */
export function daemonForFile(
  opts: {
    prepare?: (home: TestHome) => Promise<string[] | void>;
    cleanup?: () => Promise<void>;
  } = {},
): FileDaemon {
  let home: TestHome | undefined;
  let daemon: DaemonProcess | undefined;
  before(async () => {
    home = await makeTestHome();
    const args = await opts.prepare?.(home);
    daemon = await startDaemon(home, args ?? []);
  });
  after(async () => {
    try {
      const url = daemon?.url;
      const left = url ? await Sandbox.list({ url }).catch(() => []) : [];
      await Promise.allSettled(left.map((s) => Sandbox.kill(s.id, { url })));
    } finally {
      try {
        await daemon?.stop();
        await opts.cleanup?.();
      } finally {
        await home?.cleanup();
      }
    }
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('the daemon of this file has not started');
    return value;
  };
  return {
    get home() {
      return started(home);
    },
    get daemon() {
      return started(daemon);
    },
  };
}
