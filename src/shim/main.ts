#!/usr/bin/env node
/**
 * `containerd-shim-forkd-v2`, the shim containerd runs for runtime `io.containerd.forkd.v2`
 * (docs/kubernetes.md). containerd calls it with `-namespace NS -address ADDR
 * -publish-binary BIN -id ID` and an action:
 *  - `start`: start the serving shim (this program again, with no action) in its own
 *    session, wait until it listens, write `address` and `shim.pid` into the bundle (the
 *    working directory) and print the address — the only thing containerd reads from it.
 *    A pod's tasks share one shim: an app container's `start` prints the address of the
 *    shim serving its pod (grouped by `io.kubernetes.cri.sandbox-id`, pod.ts);
 *  - `delete`: clean up after a shim that was lost: kill the sandbox labelled with this
 *    task, remove the socket, print a `DeleteResponse`;
 *  - none: serve the task service over ttrpc on the socket `start` chose.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, constants, openSync, rmSync, writeSync } from 'node:fs';
import { copyFile, mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { constants as os } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sandbox } from '@forkd/sdk';
import { readBundle } from './bundle.js';
import { Publisher } from './events.js';
import { groupOf } from './pod.js';
import { encode, timestamp } from './proto.js';
import { TaskService, LABEL } from './task.js';
import { serve } from './ttrpc.js';

const NAME = 'containerd-shim-forkd-v2';
/** Where `start` tells the serving shim which socket to listen on. */
const SOCKET_ENV = 'FORKD_SHIM_SOCKET';
/** The serving shim's fd on which it says it listens. */
const READY_FD = 3;
const READY_MS = 10_000;
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
 * The socket of the shim serving group `group` (a task's own id, or its pod's):
 * beside containerd's own socket, under `s/`, named by a hash of (address, namespace,
 * group), as containerd's runc shim names its sockets.
 */
function socketPath(f: Flags, group: string): string {
  const hash = createHash('sha256')
    .update(join(f.address, f.namespace, group))
    .digest('hex');
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

/** The group of the task whose bundle is `f.bundle` (its own id without a readable one). */
async function groupOfBundle(f: Flags): Promise<string> {
  const bundle = await readBundle(f.bundle).catch(() => undefined);
  return bundle ? groupOf(bundle.annotations, f.id) : f.id;
}

async function start(f: Flags): Promise<void> {
  const group = await groupOfBundle(f);
  const path = socketPath(f, group);
  const address = `unix://${path}`;
  if (await answers(path)) {
    // A shim for this task or its pod serves already: its pid is in the group's bundle.
    await writeAtomic(f.bundle, 'address', address);
    if (group !== f.id) {
      await copyFile(join(dirname(f.bundle), group, 'shim.pid'), join(f.bundle, 'shim.pid')).catch(
        () => undefined,
      );
    }
    process.stdout.write(address);
    return;
  }
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  await rm(path, { force: true });
  const args = process.argv.slice(2).filter((a) => a !== 'start');
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), ...args], {
    cwd: f.bundle,
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
  await writeAtomic(f.bundle, 'address', address);
  await writeAtomic(f.bundle, 'shim.pid', String(child.pid));
  process.stdout.write(address);
}

/** A logger writing to the bundle's `log` FIFO, which containerd copies to its own log. */
function bundleLog(bundle: string): (msg: string) => void {
  let fd: number | undefined;
  try {
    fd = openSync(join(bundle, 'log'), constants.O_WRONLY | constants.O_NONBLOCK);
  } catch {
    fd = undefined; // nobody reads it: a shim run by hand
  }
  return (msg) => {
    if (fd === undefined) return;
    const line = `time="${new Date().toISOString()}" level=info msg=${JSON.stringify(msg)} runtime=${NAME}\n`;
    try {
      writeSync(fd, line);
    } catch {
      // a full or closed log pipe never stops the shim
    }
  };
}

async function runServer(f: Flags): Promise<void> {
  const path = process.env[SOCKET_ENV];
  if (!path) throw new Error(`run by containerd as \`${NAME} … start\`, not by hand`);
  const log = bundleLog(f.bundle);
  const publisher = new Publisher(process.env.TTRPC_ADDRESS ?? '', f.namespace, log);
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    // Let the Shutdown answer go out before the process ends.
    setTimeout(() => {
      server.close();
      publisher.close();
      rmSync(path, { force: true }); // sync: a FIFO open stuck in libuv's pool must not hold the exit
      process.exit(0);
    }, 50);
  };
  const service = new TaskService({ namespace: f.namespace, publisher, log, shutdown: stop });
  const server = await serve(path, service.handlers(), (e) => log(`ttrpc: ${String(e)}`));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  writeSync(READY_FD, 'ready\n');
  closeSync(READY_FD);
  log(`serving task ${f.id} on ${path}`);
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
  // An app container's socket is its pod's: the pod's own delete removes it.
  const group = await groupOfBundle(f);
  if (group === f.id) await rm(socketPath(f, group), { force: true });
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
