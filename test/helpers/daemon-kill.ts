/**
 * The daemon SIGKILLed in the middle of a long operation: wait until the operation has
 * visibly started (a temp file on disk, a crash point reached), kill it, and check what a
 * restart must find: no process of the home left behind and no temp file a sweep missed.
 * A host tool the daemon ran (tar, mkfs.ext4) must die with it, not at the restart.
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../../src/util/exec.js';
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
 * as their launcher sees the daemon die; the 5 s cover a loaded host's scheduling only: a
 * tool held by holdingTools would run 120 s).
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

/** A shim that is the real tool, or when armed runs it and then holds on (see holdingTools). */
const shim = (real: string, hold: string) => `#!/bin/sh
real='${real}'; hold='${hold}'; tool=$(basename "$0")
if [ "$(cat "$hold" 2>/dev/null)" = "$tool" ]; then
  rm -f "$hold"
  "$real" "$@"; rc=$?
  : > "$hold.$tool"
  sleep 120
  exit $rc
fi
exec "$real" "$@"
`;

export interface HoldingTools {
  /** Put first on the daemon's PATH. */
  bin: string;
  /** The next run of `tool` holds on once its work is done. */
  arm(tool: string): Promise<void>;
  /** Whether an armed run of `tool` did its work and now holds on. */
  holding(tool: string): Promise<boolean>;
}

/**
 * Host tools that a test can make hold on, so it kills the daemon while one runs every time
 * (a real tar or mkfs.ext4 may finish first, and an orphan that finished looks like one that
 * died): an armed shim runs the real tool, then waits 120 s in a `sleep` child, as a long
 * tool would. Unarmed, a shim execs the real tool.
 */
export async function holdingTools(dir: string, tools: string[]): Promise<HoldingTools> {
  const bin = join(dir, 'bin');
  const hold = join(dir, 'hold');
  await mkdir(bin, { recursive: true });
  for (const tool of tools) {
    const real = (await run('sh', ['-c', 'command -v "$1"', 'sh', tool])).stdout.trim();
    await writeFile(join(bin, tool), shim(real, hold));
    await chmod(join(bin, tool), 0o755);
  }
  return {
    bin,
    arm: async (tool) => {
      await rm(`${hold}.${tool}`, { force: true }); // a past run's mark is not this one's
      await writeFile(hold, tool);
    },
    holding: (tool) =>
      stat(`${hold}.${tool}`).then(
        () => true,
        () => false,
      ),
  };
}
