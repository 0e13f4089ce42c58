/**
 * `forkd cp -r`: a directory tree either way, as a tar stream (the host's tar and the
 * image's; busybox has one). Up, the archive is uploaded like a file beside the target and
 * unpacked there by the guest's tar, then removed: the fast file path, with no per-chunk
 * round trips of stdin. Down, the guest's `tar -c` streams its stdout into the host's
 * `tar -x`, with backpressure. As with `cp -r`: into DST when it is a directory, else DST
 * becomes the copy (its parent must exist, or `-p`). child_process and crypto are loaded
 * here, when a tree is copied: every other CLI call is spared them at start-up.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { basename, dirname, join, posix, resolve } from 'node:path';
import type { Writable } from 'node:stream';
import { ForkdError } from '@forkd/sdk';
import type { CopyFlags, Remote } from './cp.js';
import {
  ensureLocalDir,
  ensureRemoteDir,
  hostError,
  localStat,
  remoteKind,
  type Copied,
} from './cp-files.js';
import { usage } from './parse.js';

/** Unpacks archive $2 into directory $1 (made if missing), then removes the archive. */
const UNPACK =
  '[ -d "$1" ] || mkdir "$1" || exit 1; tar -x -f "$2" -C "$1"; rc=$?; rm -f "$2"; exit $rc';

/** Resolves when `child` exits 0; else rejects naming `what` and its stderr. */
function exited(child: ChildProcess, what: string): Promise<void> {
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  return new Promise((done, fail) => {
    child.once('error', (e: NodeJS.ErrnoException) =>
      fail(e.code === 'ENOENT' ? usage('tar is not installed on this host') : e),
    );
    child.once('close', (code) =>
      code === 0 ? done() : fail(usage(`${what} failed on this host: ${stderr.trim()}`)),
    );
  });
}

/** Where in the sandbox the tree goes: inside DST when it is a directory, else DST itself. */
async function remoteTreeTarget(to: Remote, name: string, flags: CopyFlags): Promise<string> {
  const path = to.path.length > 1 ? to.path.replace(/\/+$/, '') : to.path;
  const kind = await remoteKind(to, path);
  if (kind === 'dir') return posix.join(path, name);
  if (kind) throw usage(`${to.id}:${path} is not a directory: a directory cannot replace it`);
  await ensureRemoteDir(to, posix.dirname(path), flags);
  return path;
}

/** Host directory → sandbox; undefined when `local` is not a directory (a plain copy). */
export async function uploadTree(
  local: string,
  to: Remote,
  flags: CopyFlags,
): Promise<Copied | undefined> {
  if (!(await localStat(local))?.isDirectory()) return undefined;
  const target = await remoteTreeTarget(to, basename(resolve(local)), flags);
  const [{ spawn }, { randomBytes }] = await Promise.all([
    import('node:child_process'),
    import('node:crypto'),
  ]);
  const archive = posix.join(
    posix.dirname(target),
    `.forkd-cp-${randomBytes(6).toString('hex')}.tar`,
  );
  // Owned by root in the guest, as a copy made there by root would be.
  const tar = spawn(
    'tar',
    ['-c', '-f', '-', '--owner=0', '--group=0', '--numeric-owner', '-C', local, '.'],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let size: number;
  try {
    [{ size }] = await Promise.all([
      to.sandbox.files.write(archive, tar.stdout!, { parents: false }),
      exited(tar, `tar -c of ${local}`),
    ]);
  } catch (e) {
    await to.sandbox.files.remove(archive).catch(() => undefined);
    throw e;
  }
  const unpack = await to.sandbox.commands.run(['sh', '-c', UNPACK, 'sh', target, archive]);
  if (unpack.exitCode !== 0) {
    throw new ForkdError(
      'guest_error',
      `the sandbox's tar could not unpack into ${target}: ${unpack.stderr.trim()}`,
      {
        path: target,
      },
    );
  }
  return { from: local, to: `${to.id}:${target}`, size };
}

/** Resolves once `out` took `chunk` (backpressure for the guest's output). */
function writeTo(out: Writable, chunk: Uint8Array): Promise<void> | void {
  if (!out.write(chunk)) return new Promise((done) => out.once('drain', () => done()));
}

/** Where on the host the tree goes: inside DST when it is a directory, else DST itself. */
async function localTreeTarget(local: string, name: string, flags: CopyFlags): Promise<string> {
  const st = await localStat(local);
  if (st?.isDirectory()) return join(local, name);
  if (st) throw usage(`${local} is not a directory: a directory cannot replace it`);
  const target = local.length > 1 ? local.replace(/\/+$/, '') : local;
  await ensureLocalDir(dirname(target), flags);
  return target;
}

/** Sandbox directory → host. */
export async function downloadTree(from: Remote, local: string, flags: CopyFlags): Promise<Copied> {
  const target = await localTreeTarget(local, posix.basename(from.path) || 'root', flags);
  await mkdir(target).catch((e: NodeJS.ErrnoException) => {
    if (e.code !== 'EEXIST') throw hostError(e, target);
  });
  // Files belong to whoever runs forkd, as cp(1) makes them.
  const { spawn } = await import('node:child_process');
  const tar = spawn('tar', ['-x', '-f', '-', '--no-same-owner', '-C', target], {
    stdio: ['pipe', 'ignore', 'pipe'],
  });
  const untarred = exited(tar, `tar -x into ${target}`);
  untarred.catch(() => undefined); // awaited below, after the guest's side
  tar.stdin!.on('error', () => undefined); // a dying tar is reported by `untarred`
  let size = 0;
  let stderr = '';
  const packed = await from.sandbox.commands.run(['tar', '-c', '-f', '-', '-C', from.path, '.'], {
    onOutput: (stream, chunk) => {
      if (stream === 'stderr') {
        stderr = (stderr + Buffer.from(chunk).toString()).slice(-2000);
        return;
      }
      size += chunk.length;
      return writeTo(tar.stdin!, chunk);
    },
  });
  tar.stdin!.end();
  await untarred;
  if (packed.exitCode !== 0) {
    throw new ForkdError(
      'guest_error',
      `the sandbox's tar could not pack ${from.path}: ${stderr.trim()}`,
      { path: from.path },
    );
  }
  return { from: `${from.id}:${from.path}`, to: target, size };
}
