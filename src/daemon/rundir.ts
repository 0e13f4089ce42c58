/**
 * The daemon's run dir, `$FORKD_HOME/run` (0700): its unix socket (0600) and pid file.
 * Claiming it refuses a second daemon on the same home (two would fight over sandboxes)
 * and clears what a crashed daemon left (a stale socket, an old pid file).
 */
import { createConnection } from 'node:net';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ForkdError } from '../errors.js';

/** sockaddr_un.sun_path is 108 bytes including the terminating NUL. */
export const MAX_SOCKET_PATH_BYTES = 107;

export interface RunDir {
  dir: string;
  pidFile: string;
  socket: string;
  /** Remove the pid file and socket (on a clean shutdown). */
  release(): Promise<void>;
}

export function runDirOf(home: string): string {
  return join(home, 'run');
}

export function checkSocketPath(path: string): void {
  const bytes = Buffer.byteLength(path);
  if (bytes > MAX_SOCKET_PATH_BYTES) {
    throw new ForkdError(
      'bad_request',
      `the socket path ${path} is ${bytes} bytes; unix sockets allow ${MAX_SOCKET_PATH_BYTES}: ` +
        'pass a shorter --socket',
      { socket: path },
    );
  }
}

/** Make the run dir, refuse if another daemon is live, write our pid file. */
export async function claimRunDir(home: string, socket: string): Promise<RunDir> {
  checkSocketPath(socket);
  const dir = runDirOf(home);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700); // mkdir's mode does not apply to a dir that already existed
  const pidFile = join(dir, 'forkd.pid');
  await refuseIfRunning(pidFile, socket);
  await rm(socket, { force: true });
  await writeFile(pidFile, `${process.pid}\n`, { mode: 0o600 });
  return {
    dir,
    pidFile,
    socket,
    release: async () => {
      await rm(socket, { force: true });
      const owner = (await readFile(pidFile, 'utf8').catch(() => '')).trim();
      if (owner === String(process.pid)) await rm(pidFile, { force: true });
    },
  };
}

async function refuseIfRunning(pidFile: string, socket: string): Promise<void> {
  const pid = Number((await readFile(pidFile, 'utf8').catch(() => '')).trim());
  const live = (await socketAnswers(socket)) || (await isDaemon(pid));
  if (!live) return;
  throw new ForkdError(
    'bad_request',
    `a forkd daemon already serves this FORKD_HOME (pid file ${pidFile}, socket ${socket}); ` +
      'stop it first, or use another FORKD_HOME',
    { pid: Number.isInteger(pid) && pid > 0 ? pid : undefined },
  );
}

/** A stale socket file refuses connections; a live daemon's accepts. */
function socketAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

/** True when `pid` runs a forkd daemon (its cmdline says so: pids get recycled). */
async function isDaemon(pid: number): Promise<boolean> {
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return false;
  const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
  return argv.includes('daemon') && argv.some((a) => a.includes('forkd') || a.includes('main.js'));
}
