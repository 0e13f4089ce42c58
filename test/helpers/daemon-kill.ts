/**
 * The daemon SIGKILLed in the middle of a long operation: wait until the operation has
 * visibly started (a temp file on disk, a crash point reached), kill it, and check what a
 * restart must find: no process of the home left behind and no temp file a sweep missed.
 * A host tool the daemon ran (tar, mkfs.ext4) must die with it, not at the restart.
 */
import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { DaemonProcess } from './daemon-process.js';
import { describePids, processesOf, type TestHome } from './home.js';

/** Poll `ready` (every 50 ms, up to `ms`), then SIGKILL `d` and wait for its exit. */
export async function killWhen(
  d: DaemonProcess,
  ready: () => Promise<boolean>,
  what: string,
  ms = 60_000,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ready())) {
    assert.ok(Date.now() < deadline, `${what} never started: ${d.output().slice(-2000)}`);
    await sleep(50);
  }
  process.kill(d.pid, 'SIGKILL');
  await d.exited;
}

/** Names in `dir` (none if it does not exist) that `pick` selects. */
export async function namesIn(dir: string, pick: (name: string) => boolean): Promise<string[]> {
  return (await readdir(dir).catch(() => [] as string[])).filter(pick);
}

/** No process of `home` runs but `daemon` (a child of the killed one would be an orphan). */
export async function assertNoOrphans(home: TestHome, daemon?: DaemonProcess): Promise<void> {
  const left = await processesOf(home.dir, daemon ? [daemon.pid] : []);
  assert.deepEqual(await describePids(left), [], 'a process of the killed daemon was left running');
}

/** Pids of the processes of `home` (the daemon and what it started) whose name is in `names`. */
export async function toolsOf(home: TestHome, names: string[]): Promise<number[]> {
  const out: number[] = [];
  for (const pid of await processesOf(home.dir)) {
    const comm = (await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '')).trim();
    if (names.includes(comm)) out.push(pid);
  }
  return out;
}

/**
 * None of `names` runs for `home` within 5 s of its daemon's death (the tools are SIGKILLed
 * as their launcher sees the daemon die; the 5 s cover a loaded host's scheduling only).
 */
export async function assertToolsGone(home: TestHome, names: string[]): Promise<void> {
  const deadline = Date.now() + 5_000;
  let left = await toolsOf(home, names);
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(100);
    left = await toolsOf(home, names);
  }
  assert.deepEqual(await describePids(left), [], 'a tool outlived the killed daemon');
}
