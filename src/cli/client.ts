/**
 * What the verbs that talk to the daemon share: the `--url`/`--token` options and the SDK
 * config they make, finding a running daemon (for verbs that fall back to working
 * in-process), a command that is not in the image, and stdin forwarding.
 */
import { fstatSync } from 'node:fs';
import { isatty } from 'node:tty';
import type { Command } from 'commander';
import { DaemonUnreachableError, Forkd, isForkdError, type ClientConfig } from '@forkd/sdk';
import { imageToWire } from '@forkd/sdk/wire';
import { EXIT } from './exit.js';

/** The daemon options every client verb takes. */
export interface DaemonFlags {
  url?: string;
  token?: string;
  json?: boolean;
}

/** Add `--url` and `--token` to a verb. */
export function daemonOptions(cmd: Command): Command {
  return cmd
    .option('--url <url>', 'daemon address, http(s)://HOST:PORT or unix:PATH (default: FORKD_URL)')
    .option('--token <token>', 'bearer token (default: FORKD_TOKEN)');
}

/** The SDK config of a verb's flags (unset flags fall back to FORKD_URL / FORKD_TOKEN). */
export function clientConfig(flags: DaemonFlags): ClientConfig {
  return { url: flags.url, token: flags.token };
}

/** How long a verb waits to learn whether a daemon runs before working without one. */
const PROBE_MS = 2000;

/**
 * The daemon to use, or undefined when none was named (no --url, no FORKD_URL) and none
 * answers on the default socket: then the caller works in-process. A daemon that was named
 * but cannot be reached is an error, never a silent fallback.
 */
export async function findDaemon(config: ClientConfig = {}): Promise<Forkd | undefined> {
  const forkd = new Forkd(config);
  try {
    await forkd.health({ signal: AbortSignal.timeout(PROBE_MS) });
    return forkd;
  } catch (e) {
    const explicit = forkd.transport.config.explicit;
    if (e instanceof DaemonUnreachableError && !explicit) return undefined;
    if (isForkdError(e)) throw e;
    throw new DaemonUnreachableError(
      `the forkd daemon at ${forkd.url} did not answer /healthz within ${PROBE_MS} ms`,
    );
  }
}

/** The daemon's images in the REST API's shape (what `forkd images --json` prints), if one runs. */
export async function daemonImages(): Promise<Record<string, unknown>[] | undefined> {
  const forkd = await findDaemon();
  return forkd && (await forkd.images.list()).map(imageToWire);
}

/** A command that is not in the image exits 127 with the shell's message; else rethrow. */
export function commandFailed(e: unknown, argv: string[]): number {
  if (isForkdError(e, 'command_not_found')) {
    process.stderr.write(`forkd: ${argv[0]}: command not found in image\n`);
    return EXIT.commandNotFound;
  }
  throw e;
}

/**
 * Whether to forward our stdin to a command: with `-i` always; else when it is a pipe or a
 * file, but not a terminal, and not /dev/null (a script's or an agent's usual stdin), which
 * would cost the call a round trip to send nothing but end of file.
 */
export function forwardsStdin(forced: boolean | undefined): boolean {
  if (forced) return true;
  try {
    const st = fstatSync(0);
    // A terminal is not forwarded unless forced; /dev/null is character device 1:3.
    if (st.isCharacterDevice()) return !isatty(0) && st.rdev !== DEV_NULL;
    return true;
  } catch {
    return false; // no stdin at all
  }
}

/** /dev/null's device number on Linux (major 1, minor 3). */
const DEV_NULL = (1 << 8) | 3;

/**
 * Copy our stdin into a command's until EOF. The command may exit before reading it all;
 * that is not an error of ours, so failures end the copy quietly.
 */
export async function pumpStdin(
  write: (chunk: Buffer) => Promise<void>,
  end: () => Promise<void>,
): Promise<void> {
  try {
    for await (const chunk of process.stdin) await write(chunk as Buffer);
    await end();
  } catch {
    // see above
  }
}
