/**
 * A private FORKD_HOME per end-to-end test: the guest kernel and the default image are
 * linked (read-only) from the set-up home; everything a test creates lives in a temp dir
 * removed afterwards, and `assertNoLeftovers` proves no QEMU, socket or overlay remains.
 */
import { mkdtemp, mkdir, readdir, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { forkdHome, paths, type Paths } from '../../src/config.js';
import { pidAlive } from '../../src/util/pid.js';
import { cgroupsLeft, removeCgroups } from './cgroups.js';
import { sweepDeadNetns } from './netcheck.js';

/** The home `scripts/setup.sh` prepared (kernel + busybox image). */
export const BASE_HOME = process.env.FORKD_TEST_BASE_HOME ?? forkdHome();

export interface TestHome {
  dir: string;
  paths: Paths;
  env: NodeJS.ProcessEnv;
  cleanup(): Promise<void>;
}

/**
 * Make a temp home sharing the base home's kernels and busybox image; `under` puts it on
 * another filesystem (a small tmpfs, for the disk-full tests).
 */
export async function makeTestHome(opts: { under?: string } = {}): Promise<TestHome> {
  const dir = await mkdtemp(join(opts.under ?? tmpdir(), 'forkd-test-'));
  const p = paths(dir);
  await mkdir(p.images, { recursive: true });
  await symlink(paths(BASE_HOME).kernels, p.kernels);
  await symlink(join(paths(BASE_HOME).images, 'busybox'), join(p.images, 'busybox'));
  return {
    dir,
    paths: p,
    env: { ...process.env, FORKD_HOME: dir },
    cleanup: async () => {
      await killQemusUnder(dir);
      await removeCgroups(p.home);
      await sweepDeadNetns();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Pids of QEMU processes whose command line mentions `dir`. */
export async function qemusUnder(dir: string): Promise<number[]> {
  const pids: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const cmd = await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '');
    if (cmd.startsWith('qemu-system') && cmd.includes(dir)) pids.push(Number(name));
  }
  return pids;
}

/**
 * Pids of processes started for this home (FORKD_HOME=`dir` in their environment), other
 * than `except` and their descendants. After a daemon is SIGKILLed, what its children left
 * running (orphans); what a restarted daemon runs itself does not count.
 */
export async function processesOf(dir: string, except: number[] = []): Promise<number[]> {
  const pids: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const env = await readFile(`/proc/${name}/environ`, 'utf8').catch(() => '');
    if (!env.split('\0').includes(`FORKD_HOME=${dir}`)) continue;
    if (await descendsFrom(Number(name), except)) continue;
    // A process that ended while we looked (a restarted daemon's short host tool) is not
    // left running: its ppid walk failed only because it was gone.
    if (pidAlive(Number(name))) pids.push(Number(name));
  }
  return pids;
}

/** Whether `pid` is one of `roots` or a descendant of one (walking ppid up to init). */
async function descendsFrom(pid: number, roots: number[]): Promise<boolean> {
  for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
    if (roots.includes(p)) return true;
    const stat = await readFile(`/proc/${p}/stat`, 'utf8').catch(() => '');
    // The command name may hold spaces or parentheses: the fields follow the last ')'.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (!Number.isInteger(ppid)) return false;
    p = ppid;
  }
  return false;
}

/** `pid: command line` of each pid still running, for a failure message. */
export async function describePids(pids: number[]): Promise<string[]> {
  return Promise.all(
    pids.map(async (pid) => {
      const cmd = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '(gone)');
      return `${pid}: ${cmd.split('\0').join(' ').trim()}`;
    }),
  );
}

/** Safety net for failed tests: end QEMUs this test home started (by pid, never by name). */
async function killQemusUnder(dir: string): Promise<void> {
  for (const pid of await qemusUnder(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/** No QEMU of this home runs and no sandbox directory is left. */
export async function assertNoLeftovers(home: TestHome): Promise<void> {
  assert.deepEqual(await qemusUnder(home.dir), [], 'a QEMU process was left running');
  const left = await readdir(home.paths.sandboxes).catch(() => []);
  assert.deepEqual(left, [], 'a sandbox directory was left behind');
  assert.deepEqual(await cgroupsLeft(home.paths.home), [], 'a sandbox cgroup was left behind');
}
