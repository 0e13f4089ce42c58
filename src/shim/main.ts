#!/usr/bin/env node
/**
 * `containerd-shim-forkd-v2`, the shim containerd runs for runtime `io.containerd.forkd.v2`
 * (docs/kubernetes.md). containerd calls it with `-namespace NS -address ADDR
 * -publish-binary BIN -id ID` and an action:
 *  - `start`: print the address of the shim serving the task's containerd namespace — one
 *    process for all its tasks and pods (a Node process costs tens of MiB; one per node
 *    spreads that over its pods). A running shim is asked to keep the task's place
 *    (Reserve); without one, start it (this program again, with no action) in its own
 *    session and wait until it listens. Either way write `address` and `shim.pid` into the
 *    bundle (the working directory); the address is all containerd reads from it;
 *  - `delete`: clean up after a shim that was lost: kill the sandbox labelled with this
 *    task, remove the socket if no shim answers on it, print a `DeleteResponse`;
 *  - none: serve the task service over ttrpc on the socket `start` chose.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, rmSync, writeSync } from 'node:fs';
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { constants as os } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Sandbox } from '@forkd/sdk';
import { Publisher } from './events.js';
import { ShimLog } from './log.js';
import { decode, encode, timestamp } from './proto.js';
import { TaskService, LABEL, SHIM_SERVICE } from './task.js';
import { serve, TtrpcClient } from './ttrpc.js';
import { unmountLeft } from './rootfs.js';

const NAME = 'containerd-shim-forkd-v2';
/** Where `start` tells the serving shim which socket to listen on. */
const SOCKET_ENV = 'FORKD_SHIM_SOCKET';
/** The serving shim's fd on which it says it listens. */
const READY_FD = 3;
const READY_MS = 10_000;
/**
 * V8 flags of the serving shim, for its RSS: young generation semi-spaces of 1 MiB instead
 * of 16 (its heap stays small under load), and no optimising compilers (`--lite-mode`: 6
 * MiB less; it waits on sockets, not on its own code).
 */
const NODE_FLAGS = ['--max-semi-space-size=1', '--lite-mode'];
/** A unix socket path's limit, as containerd checks it. */
const SOCKET_PATH_MAX = 106;

interface Flags {
  namespace: string;
  address: string;
  id: string;
  bundle: string;
  action: string;
}

/** Go's flag syntax as containerd uses it: `-name value`, `--name=value`, bools alone. */
function parseFlags(argv: string[]): Flags {
  const values: Record<string, string> = {};
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const m = /^--?([\w-]+)(?:=(.*))?$/.exec(argv[i] ?? '');
    if (!m) {
      rest.push(argv[i] ?? '');
      continue;
    }
    const [, name = '', inline] = m;
    if (name === 'debug' || name === 'v') values[name] = inline ?? 'true';
    else values[name] = inline ?? argv[++i] ?? '';
  }
  return {
    namespace: values.namespace ?? '',
    address: values.address ?? '',
    id: values.id ?? '',
    bundle: values.bundle || process.cwd(),
    action: rest[0] ?? '',
  };
}

/**
 * The socket of the shim serving containerd `f.address`'s namespace `f.namespace`: beside
 * containerd's own socket, under `s/`, named by a hash of (address, namespace), as
 * containerd's runc shim names its sockets. One shim serves all the namespace's tasks.
 */
function socketPath(f: Flags): string {
  const hash = createHash('sha256').update(join(f.address, f.namespace)).digest('hex');
  const path = join(dirname(f.address), 's', hash);
  if (path.length > SOCKET_PATH_MAX) {
    throw new Error(
      `the shim socket ${path} is longer than ${SOCKET_PATH_MAX} bytes: give containerd a shorter --address`,
    );
  }
  return path;
}

/** Whether something answers on the unix socket at `path`. */
function answers(path: string): Promise<boolean> {
  return new Promise((done) => {
    const s = connect(path);
    s.once('connect', () => (s.destroy(), done(true)));
    s.once('error', () => done(false));
  });
}

/** Write `data` to `dir/name` atomically (containerd may read it at any time). */
async function writeAtomic(dir: string, name: string, data: string): Promise<void> {
  const tmp = join(dir, `.${name}`);
  await writeFile(tmp, data, { mode: 0o600 });
  await rename(tmp, join(dir, name));
}

/**
 * Ask the shim serving on `path` to keep running for task `id` until containerd creates it
 * (its Shutdown for another task would end it otherwise); its pid, or undefined when no
 * shim serves there or the one there is ending.
 */
async function reserve(path: string, id: string): Promise<number | undefined> {
  const client = await TtrpcClient.connect(path).catch(() => undefined);
  if (!client) return undefined;
  try {
    const res = await client.call(SHIM_SERVICE, 'Reserve', encode('task.IdRequest', { id }));
    return decode<{ shim_pid: number }>('task.ConnectResponse', res).shim_pid;
  } catch {
    return undefined;
  } finally {
    client.close();
  }
}

/**
 * Run `fn` holding the lock file `path.lock` (made exclusively), so two `start`s never
 * both start a shim on one socket; undefined when another holds it. A lock older than
 * any start could take is a dead start's, and is taken over.
 */
async function withLock<T>(path: string, fn: () => Promise<T>): Promise<T | undefined> {
  const lock = `${path}.lock`;
  try {
    await writeFile(lock, String(process.pid), { flag: 'wx', mode: 0o600 });
  } catch {
    const age = Date.now() - ((await stat(lock).catch(() => undefined))?.mtimeMs ?? Date.now());
    if (age > 2 * READY_MS) await rm(lock, { force: true });
    return undefined;
  }
  try {
    return await fn();
  } finally {
    await rm(lock, { force: true });
  }
}

/** Start the serving shim on `path`, reserved for task `f.id`; its pid once it listens. */
async function spawnShim(f: Flags, path: string): Promise<number> {
  await rm(path, { force: true }); // a killed shim's socket
  const args = process.argv.slice(2).filter((a) => a !== 'start');
  const child = spawn(process.execPath, [...NODE_FLAGS, fileURLToPath(import.meta.url), ...args], {
    cwd: '/', // not the first task's bundle: it goes with that task
    env: { ...process.env, [SOCKET_ENV]: path },
    detached: true,
    stdio: ['ignore', 'ignore', 'ignore', 'pipe'],
  });
  await new Promise<void>((ready, fail) => {
    const timer = setTimeout(
      () => fail(new Error(`the shim did not listen in ${READY_MS} ms`)),
      READY_MS,
    );
    child.stdio[READY_FD]?.once('data', () => (clearTimeout(timer), ready()));
    child.once('exit', (code) => {
      clearTimeout(timer);
      fail(new Error(`the shim exited (${code}) before it listened: see containerd's log`));
    });
  });
  child.stdio[READY_FD]?.destroy();
  child.unref();
  return child.pid ?? 0;
}

/** The pid of the shim serving `path`, reserved for task `f.id`: the running one, or a new one. */
async function sharedShim(f: Flags, path: string): Promise<number> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const deadline = Date.now() + 2 * READY_MS;
  for (;;) {
    const pid =
      (await reserve(path, f.id)) ??
      (await withLock(path, async () => (await reserve(path, f.id)) ?? spawnShim(f, path)));
    if (pid) return pid;
    if (Date.now() > deadline) {
      throw new Error(`no shim answered on ${path} and another start held its lock`);
    }
    await sleep(100);
  }
}

async function start(f: Flags): Promise<void> {
  const path = socketPath(f);
  const pid = await sharedShim(f, path);
  await writeAtomic(f.bundle, 'address', `unix://${path}`);
  await writeAtomic(f.bundle, 'shim.pid', String(pid));
  process.stdout.write(`unix://${path}`);
}

async function runServer(f: Flags): Promise<void> {
  const path = process.env[SOCKET_ENV];
  if (!path) throw new Error(`run by containerd as \`${NAME} … start\`, not by hand`);
  const log = new ShimLog();
  log.open(f.id, f.bundle);
  const publisher = new Publisher(process.env.TTRPC_ADDRESS ?? '', f.namespace, log.write);
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    // Gone at once, so the next start makes a new shim instead of asking this one.
    rmSync(path, { force: true });
    // Let the Shutdown answer go out before the process ends.
    setTimeout(() => {
      server.close();
      publisher.close();
      process.exit(0);
    }, 50);
  };
  const service = new TaskService({
    namespace: f.namespace,
    address: f.address,
    publisher,
    log,
    shutdown: stop,
  });
  service.reserve(f.id);
  const server = await serve(path, service.handlers(), (e) => log.write(`ttrpc: ${String(e)}`));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  writeSync(READY_FD, 'ready\n');
  closeSync(READY_FD);
  log.write(`serving namespace ${f.namespace} on ${path}`);
}

/** `delete`: the shim is gone; kill what it left and answer a DeleteResponse. */
async function deleteTask(f: Flags): Promise<void> {
  try {
    const left = await Sandbox.list({ label: `${LABEL.id}=${f.id}` });
    const mine = left.filter((s) => s.labels[LABEL.namespace] === f.namespace);
    await Promise.all(mine.map((s) => Sandbox.kill(s.id)));
  } catch (e) {
    process.stderr.write(
      `${NAME}: could not kill the sandbox of ${f.id}: ${(e as Error).message}\n`,
    );
  }
  await unmountLeft(f.bundle);
  // The namespace's shim serves other tasks still: its socket goes only if it is dead.
  const path = socketPath(f);
  await withLock(path, async () => {
    if (!(await answers(path))) await rm(path, { force: true });
  });
  const killed = 128 + os.signals.SIGKILL;
  process.stdout.write(
    encode('task.DeleteResponse', {
      pid: 0,
      exit_status: killed,
      exited_at: timestamp(Date.now()),
    }),
  );
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2));
  if (!f.namespace || !f.id)
    throw new Error('-namespace and -id are required (containerd gives them)');
  f.bundle = resolve(f.bundle);
  if (f.action === 'start') return start(f);
  if (f.action === 'delete') return deleteTask(f);
  if (f.action) throw new Error(`unknown action "${f.action}": containerd calls start or delete`);
  return runServer(f);
}

main().catch((e: unknown) => {
  process.stderr.write(`${NAME}: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
