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
import { cgroupsLeft, removeCgroups } from './cgroups.js';

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
 * Pids of processes (other than `except`) started for this home: FORKD_HOME=`dir` in their
 * environment. After a daemon is SIGKILLed, what its children left running (orphans).
 */
export async function processesOf(dir: string, except: number[] = []): Promise<number[]> {
  const pids: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name) || except.includes(Number(name))) continue;
    const env = await readFile(`/proc/${name}/environ`, 'utf8').catch(() => '');
    if (env.split('\0').includes(`FORKD_HOME=${dir}`)) pids.push(Number(name));
  }
  return pids;
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
