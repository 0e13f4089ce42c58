/**
 * The daemon SIGKILLed in the middle of a long operation: wait until the operation has
 * visibly started (a temp file on disk, a crash point reached), kill it, and check what a
 * restart must find: no process of the home left behind and no temp file a sweep missed.
 */
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
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
  assert.deepEqual(
    await describePids(left),
    [],
    'a process of the killed daemon was left running',
  );
}
