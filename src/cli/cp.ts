/**
 * `forkd cp SRC DST`: copy one file between this host and a sandbox. The sandbox side is
 * written `ID:/path`; `-` is stdin or stdout. Bytes stream both ways (nothing is held
 * whole), and a download goes to a temporary name renamed into place, so a failed copy
 * never leaves half a file under the real name.
 */
import type { Command } from 'commander';
import { createReadStream, createWriteStream } from 'node:fs';
import { rename, rm, stat } from 'node:fs/promises';
import { basename, join, posix } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { isForkdError, Sandbox, type ClientConfig } from '@forkd/sdk';
import { ForkdError } from '../errors.js';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson } from './output.js';

/** `sbx-0123456789ab:/etc/hosts` → the sandbox and the path in it. */
const REMOTE = /^([A-Za-z0-9][A-Za-z0-9_-]*):(.*)$/;

interface Remote {
  id: string;
  path: string;
}

/** What `--json` prints. */
interface Copied {
  from: string;
  to: string;
  size: number;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<src>', 'local path, -, or ID:/path')
      .argument('<dst>', 'local path, -, or ID:/path')
      .option('--json', 'machine-readable output'),
  ).action(
    action(async (src: string, dst: string, flags: DaemonFlags) => {
      const from = remoteOf(src);
      const to = remoteOf(dst);
      const config = clientConfig(flags);
      let copied: Copied;
      if (from && !to) copied = await download(from, dst, config);
      else if (to && !from) copied = await upload(src, to, config);
      else {
        throw new ForkdError(
          'bad_request',
          'one of SRC and DST must be a sandbox path (ID:/path), the other a local path or -',
        );
      }
      if (flags.json) printJson(copied);
    }),
  );
}

function remoteOf(arg: string): Remote | undefined {
  const m = REMOTE.exec(arg);
  return m ? { id: m[1] ?? '', path: m[2] ?? '' } : undefined;
}

async function upload(local: string, to: Remote, config: ClientConfig): Promise<Copied> {
  const sandbox = await Sandbox.connect(to.id, config);
  const source: LocalSource = local === '-' ? { stream: process.stdin } : await openLocal(local);
  const path = await remoteTarget(sandbox, to.path, source.name);
  const { size } = await sandbox.files.write(path, source.stream, { mode: source.mode });
  return { from: local, to: `${to.id}:${path}`, size };
}

interface LocalSource {
  stream: Readable;
  /** The local file's permission bits and name (none for stdin). */
  mode?: number;
  name?: string;
}

async function openLocal(path: string): Promise<LocalSource> {
  const st = await stat(path).catch(() => {
    throw new ForkdError('bad_request', `${path}: no such file`);
  });
  if (!st.isFile()) throw new ForkdError('bad_request', `${path}: cp copies single files`);
  return { stream: createReadStream(path), mode: st.mode & 0o7777, name: basename(path) };
}

/** A sandbox directory as the target means the file goes inside it, as cp(1) does. */
async function remoteTarget(sandbox: Sandbox, path: string, name?: string): Promise<string> {
  if (!name) return path;
  if (path.endsWith('/')) return path + name;
  try {
    if ((await sandbox.files.stat(path)).kind === 'dir') return posix.join(path, name);
  } catch (e) {
    if (!isForkdError(e, 'guest_file_not_found')) throw e;
  }
  return path;
}

async function download(from: Remote, local: string, config: ClientConfig): Promise<Copied> {
  const sandbox = await Sandbox.connect(from.id, config);
  const info = await sandbox.files.stat(from.path);
  if (info.kind === 'dir')
    throw new ForkdError('bad_request', `${from.path}: cp copies single files`);
  const source = await sandbox.files.readStream(from.path);
  if (local === '-')
    return { from: `${from.id}:${from.path}`, to: '-', size: await toStdout(source) };
  const target = await localTarget(local, posix.basename(from.path));
  const staging = `${target}.forkd-${process.pid}.part`;
  try {
    await pipeline(source, createWriteStream(staging, { mode: info.mode & 0o7777 }));
    await rename(staging, target);
  } catch (e) {
    await rm(staging, { force: true });
    throw e;
  }
  return { from: `${from.id}:${from.path}`, to: target, size: (await stat(target)).size };
}

/** A local directory as the target means the file goes inside it. */
async function localTarget(path: string, name: string): Promise<string> {
  const st = await stat(path).catch(() => undefined);
  return st?.isDirectory() ? join(path, name) : path;
}

/** Copy to our stdout (which must never be ended), holding back while the pipe is full. */
async function toStdout(source: Readable): Promise<number> {
  let size = 0;
  for await (const chunk of source) {
    size += (chunk as Buffer).length;
    if (!process.stdout.write(chunk as Buffer)) {
      await new Promise((resolve) => process.stdout.once('drain', resolve));
    }
  }
  return size;
}
