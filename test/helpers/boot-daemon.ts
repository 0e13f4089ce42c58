/**
 * A daemon for the boot snapshot tests (test/e2e/snapshots/boot*.test.ts): started on a
 * test home, its sandboxes killed and itself stopped when the test ends, and `forkd create
 * … --json` through it answering the sandbox's id and the snapshot it was forked from.
 */
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { Sandbox } from '@forkd/sdk';
import { forkd } from './cli.js';
import { startDaemon, type DaemonProcess } from './daemon-process.js';
import type { TestHome } from './home.js';

export interface BootDaemon {
  daemon: DaemonProcess;
  /** The home's environment with FORKD_URL of this daemon. */
  env: NodeJS.ProcessEnv;
  /** `forkd create ARGS… --json`: must succeed. */
  create(...args: string[]): Promise<{ id: string; snapshot: string | null }>;
}

export async function bootDaemon(
  t: TestContext,
  home: TestHome,
  args: string[] = [],
): Promise<BootDaemon> {
  const daemon = await startDaemon(home, args);
  t.after(async () => {
    for (const sb of await Sandbox.list({ url: daemon.url }))
      await Sandbox.kill(sb.id, { url: daemon.url }).catch(() => undefined);
    await daemon.stop();
  });
  const env = { ...home.env, FORKD_URL: daemon.url };
  const create = async (...args: string[]) => {
    const r = await forkd(['create', ...args, '--json'], { env });
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout.toString()) as { id: string; snapshot: string | null };
  };
  return { daemon, env, create };
}
