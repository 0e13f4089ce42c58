/**
 * The host-wide lock and user list behind forkd's shared network state: every daemon on a
 * host (a second FORKD_HOME, a test's daemon) shares the `inet forkd` table, IPv4
 * forwarding and the `fkd-N` index space. A daemon's start-up sweep, a namespace being made
 * and the table's removal run under one `flock(1)` lock, so a sweep never takes a namespace
 * another daemon has made but not yet recorded, and the table goes only when no live
 * daemon uses it. The kernel drops the lock with its holder, so a SIGKILLed daemon holds
 * nothing.
 */
import { spawn } from 'node:child_process';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { once } from 'node:events';
import { ForkdError } from '../../errors.js';
import { pidAlive } from '../../util/pid.js';

/** Where the lock file and the user list live (next to the namespaces' owner files). */
export const HOST_STATE_DIR = '/run/forkd-netns';
const LOCK_FILE = join(HOST_STATE_DIR, 'lock');
const USERS_DIR = join(HOST_STATE_DIR, 'daemons');
/** How long a daemon waits for another's sweep or namespace before it gives up. */
const LOCK_WAIT_S = 60;

/**
 * Run `fn` holding the host lock. `flock` holds it until its `cat` sees stdin close, which
 * happens when `fn` ends or when this process dies.
 */
export async function withHostLock<T>(fn: () => Promise<T>): Promise<T> {
  await mkdir(HOST_STATE_DIR, { recursive: true, mode: 0o700 });
  const holder = spawn(
    'flock',
    ['-w', String(LOCK_WAIT_S), LOCK_FILE, 'sh', '-c', 'echo held; exec cat >/dev/null'],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  holder.stdin.on('error', () => undefined); // flock gave up (its exit says why)
  const exited = once(holder, 'exit').then(([code]) => code as number | null);
  try {
    await Promise.race([
      once(holder.stdout, 'data'),
      exited.then((code) => {
        throw new ForkdError(
          'internal',
          `could not take the host network lock ${LOCK_FILE} (flock exit ${code}): ` +
            `another forkd daemon held it over ${LOCK_WAIT_S} s`,
        );
      }),
      once(holder, 'error').then(([e]) => {
        throw e as Error;
      }),
    ]);
    return await fn();
  } finally {
    holder.stdin.end();
    await exited;
  }
}

/** This daemon uses the host table from now on (call under the lock). */
export async function addUser(): Promise<void> {
  await mkdir(USERS_DIR, { recursive: true, mode: 0o700 });
  await writeFile(join(USERS_DIR, String(process.pid)), '');
}

/** This daemon no longer uses the host table (call under the lock). */
export async function removeUser(): Promise<void> {
  await rm(join(USERS_DIR, String(process.pid)), { force: true });
}

/** Live daemons other than this one that use the host table; dead ones' entries go. */
export async function otherUsers(): Promise<number[]> {
  const names = await readdir(USERS_DIR).catch(() => [] as string[]);
  const live: number[] = [];
  for (const name of names) {
    const pid = Number(name);
    if (pid === process.pid) continue;
    if (pidAlive(pid)) live.push(pid);
    else await rm(join(USERS_DIR, name), { force: true });
  }
  return live;
}
