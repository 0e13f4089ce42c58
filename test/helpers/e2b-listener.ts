/**
 * A real `forkd daemon --e2b-listen` for the E2B tests: its own home, a token file, the
 * listener on a free loopback port, and the environment the unmodified `e2b` SDK reads
 * (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL) pointed at it. `stop` kills what is left and
 * removes the home, also after a failed test.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Sandbox, Snapshot } from '@forkd/sdk';
import { startDaemon, type DaemonProcess } from './daemon-process.js';
import { makeTestHome, type TestHome } from './home.js';
import { freePort } from './ports.js';

/** A template as E2B makes them: a `user` account its calls default to, home /home/user. */
export const ADD_USER = [
  "echo 'user:x:1000:1000::/home/user:/bin/sh' >> /etc/passwd",
  "echo 'user:x:1000:' >> /etc/group",
  'mkdir -p /home/user && chown 1000:1000 /home/user',
].join(' && ');
/** E2B's SDK runs commands with `/bin/bash -l -c`: busybox has sh only. */
export const BASH_SHIM = `printf '#!/bin/sh\\nexec /bin/sh "$@"\\n' > /bin/bash && chmod 755 /bin/bash`;

export interface E2bListener {
  home: TestHome;
  daemon: DaemonProcess;
  /** The forkd SDK's config for the same daemon. */
  forkd: { url: string; token: string };
  stop(): Promise<void>;
}

/** E2B's template as the tests make it: busybox with the bash shim and a `user` account. */
export async function makeUserTemplate(forkd: E2bListener['forkd'], tag: string): Promise<void> {
  await Snapshot.create({ ...forkd, tag, warm: [BASH_SHIM, ADD_USER], user: 'user' });
}

/** Start a daemon with the E2B listener and point the `e2b` SDK at it. */
export async function startE2bListener(token: string): Promise<E2bListener> {
  const home = await makeTestHome();
  const tokenFile = join(home.dir, 'tokens');
  const port = await freePort();
  let daemon: DaemonProcess;
  try {
    await writeFile(tokenFile, `e2b:${token}\n`, { mode: 0o600 });
    daemon = await startDaemon(home, [
      '--token-file',
      tokenFile,
      '--e2b-listen',
      `127.0.0.1:${port}`,
    ]);
  } catch (e) {
    await home.cleanup();
    throw e;
  }
  const forkd = { url: daemon.url, token };
  process.env.E2B_API_KEY = token;
  process.env.E2B_API_URL = `http://127.0.0.1:${port}`;
  process.env.E2B_SANDBOX_URL = `http://127.0.0.1:${port}`;
  const stop = async () => {
    try {
      const left = await Sandbox.list(forkd).catch(() => []);
      await Promise.allSettled(left.map((s) => Sandbox.kill(s.id, forkd)));
    } finally {
      await daemon.stop();
      await home.cleanup();
    }
  };
  return { home, daemon, forkd, stop };
}
