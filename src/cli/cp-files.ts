/**
 * `forkd cp` of one file, and the target rules both kinds of copy share: a directory as the
 * target means "inside it", a missing parent directory is an error naming the path the user
 * typed (created with `-p`), on the host and in the sandbox alike. A download is written to
 * a temporary name beside the target and renamed into place, so a failed copy never leaves
 * half a file under the real name.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join, posix } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ForkdError, isForkdError } from '@forkd/sdk';
import type { CopyFlags, Remote } from './cp.js';
import { usage } from './parse.js';

/** What `--json` prints. */
export interface Copied {
  from: string;
  to: string;
  /** Bytes copied (for `-r`, of the tar stream). */
  size: number;
}

// ---- the host side --------------------------------------------------------------------

/** A host path's stat, or undefined when nothing is there. */
export async function localStat(path: string) {
  return stat(path).catch((e: NodeJS.ErrnoException) => {
    if (e.code === 'ENOENT' || e.code === 'ENOTDIR') return undefined;
    throw hostError(e, path);
  });
}

/** A failure on this host, naming the user's path (never a temporary name of ours). */
export function hostError(e: NodeJS.ErrnoException, path: string): ForkdError {
  if (e.code === 'EACCES' || e.code === 'EPERM')
    return usage(`${path}: permission denied on this host`);
  if (e.code === 'ENOENT') return usage(`${path}: no such file or directory on this host`);
  return usage(`${path}: ${e.message.replace(/^\w+: /, '')}`);
}

/** Makes sure a host directory exists: created with -p, else an error naming it. */
export async function ensureLocalDir(dir: string, flags: CopyFlags): Promise<void> {
  const st = await localStat(dir);
  if (st?.isDirectory()) return;
  if (st) throw usage(`${dir}: not a directory on this host`);
  if (!flags.parents) throw usage(`${dir}: no such directory on this host (-p creates it)`);
  await mkdir(dir, { recursive: true }).catch((e: NodeJS.ErrnoException) => {
    throw hostError(e, dir);
  });
}

/** Where on the host `name` goes for DST `local`: inside it when it is a directory. */
export async function localTarget(local: string, name: string, flags: CopyFlags): Promise<string> {
  const st = await localStat(local);
  if (st?.isDirectory()) return join(local, name);
  if (local.endsWith('/')) {
    await ensureLocalDir(local, flags);
    return join(local, name);
  }
  await ensureLocalDir(dirname(local), flags);
  return local;
}

// ---- the sandbox side -----------------------------------------------------------------

/** A guest path's kind, or undefined when nothing is there. */
export async function remoteKind(to: Remote, path: string): Promise<string | undefined> {
  try {
    return (await to.sandbox.files.stat(path)).kind;
  } catch (e) {
    if (isForkdError(e, 'guest_file_not_found')) return undefined;
    throw e;
  }
}

/** Makes sure a sandbox directory exists: created with -p, else an error naming it. */
export async function ensureRemoteDir(to: Remote, dir: string, flags: CopyFlags): Promise<void> {
  const kind = await remoteKind(to, dir);
  if (kind === 'dir') return;
  if (kind) throw usage(`${to.id}:${dir}: not a directory in the sandbox`);
  if (!flags.parents) {
    throw new ForkdError(
      'guest_file_not_found',
      `${to.id}:${dir}: no such directory in the sandbox (-p creates it)`,
      { path: dir },
    );
  }
  await to.sandbox.files.makeDir(dir, { parents: true });
}

/** Where in the sandbox a file called `name` goes for DST `to`. */
async function remoteTarget(to: Remote, name: string | undefined, flags: CopyFlags) {
  const kind = await remoteKind(to, to.path);
  const intoDir = kind === 'dir' || (!kind && to.path.endsWith('/'));
  if (intoDir && !name) throw usage(`${to.id}:${to.path} is a directory: name the file to write`);
  if (intoDir) {
    await ensureRemoteDir(to, to.path, flags);
    return posix.join(to.path, name ?? '');
  }
  if (!kind) await ensureRemoteDir(to, posix.dirname(to.path), flags);
  return to.path;
}

// ---- the copies -----------------------------------------------------------------------

interface LocalSource {
  stream: Readable;
  /** The local file's permission bits and name (none for stdin). */
  mode?: number;
  name?: string;
}

async function openLocal(path: string): Promise<LocalSource> {
  const st = await localStat(path);
  if (!st) throw usage(`${path}: no such file or directory on this host`);
  if (st.isDirectory()) throw usage(`${path} is a directory (copy it with -r)`);
  return { stream: createReadStream(path), mode: st.mode & 0o7777, name: basename(path) };
}

/** Host file (or stdin) → sandbox. */
export async function uploadFile(local: string, to: Remote, flags: CopyFlags): Promise<Copied> {
  const source: LocalSource = local === '-' ? { stream: process.stdin } : await openLocal(local);
  const path = await remoteTarget(to, source.name, flags);
  // The target's directory is there now: the daemon must not create any on its own.
  const opts = { mode: source.mode, parents: false };
  const { size } = await to.sandbox.files.write(path, source.stream, opts);
  return { from: local, to: `${to.id}:${path}`, size };
}

/** Sandbox file → host file (or stdout), with the guest file's permission bits. */
export async function downloadFile(
  from: Remote,
  mode: number,
  local: string,
  flags: CopyFlags,
): Promise<Copied> {
  const source = await from.sandbox.files.readStream(from.path);
  const label = `${from.id}:${from.path}`;
  if (local === '-') return { from: label, to: '-', size: await toStdout(source) };
  const target = await localTarget(local, posix.basename(from.path), flags);
  const staging = `${target}.forkd-${process.pid}.part`;
  try {
    await pipeline(source, createWriteStream(staging, { mode: mode & 0o7777 }));
    await rename(staging, target);
  } catch (e) {
    await rm(staging, { force: true });
    throw isForkdError(e) ? e : hostError(e as NodeJS.ErrnoException, target);
  }
  return { from: label, to: target, size: (await stat(target)).size };
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
