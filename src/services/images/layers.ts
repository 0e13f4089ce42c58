/**
 * Layer application as container runtimes do it (the OCI image spec's "Applying
 * Changesets"): each layer's tar is unpacked over the tree of the ones below it, `.wh.NAME`
 * deletes NAME, `.wh..wh..opq` empties its directory of what lower layers put there, and
 * every path is resolved inside the tree (a symlink in a layer can never lead a write out
 * of it). What the host cannot (or, unprivileged, may not) apply — devices, fifos, xattrs,
 * and without root the owners — is collected as fixups that are written into the ext4 image
 * after `mkfs.ext4 -d` (fixups.ts).
 */
import { createReadStream } from 'node:fs';
import {
  chmod,
  lchown,
  link,
  lstat,
  lutimes,
  mkdir,
  open,
  readdir,
  readlink,
  rm,
  symlink,
  utimes,
} from 'node:fs/promises';
import { join, posix } from 'node:path';
import { createGunzip } from 'node:zlib';
import { ForkdError } from '../../errors.js';
import { spawnTool, toolMissing } from '../../util/exec.js';
import { readTar, type TarHeader } from './tar.js';

/** What the ext4 image needs beyond what the host tree holds (paths are image paths). */
export interface Fixup {
  /** Set owner and full mode (type bits included) in the image. */
  owner?: { uid: number; gid: number; mode: number };
  device?: { kind: 'c' | 'b' | 'p'; major: number; minor: number };
  xattrs?: Map<string, Buffer>;
}

/** A tree being built from layers. */
export interface Tree {
  root: string;
  asRoot: boolean;
  fixups: Map<string, Fixup>;
  /** Directory metadata, applied once every layer is in (children change a dir's mtime). */
  dirs: Map<string, TarHeader>;
  entries: number;
}

const WHITEOUT = '.wh.';
const OPAQUE = '.wh..wh..opq';
const MAX_LINKS = 40;
const TYPE_BITS = {
  file: 0o100000,
  dir: 0o040000,
  symlink: 0o120000,
  char: 0o020000,
  block: 0o060000,
  fifo: 0o010000,
};

export function newTree(root: string): Tree {
  return { root, asRoot: process.getuid?.() === 0, fixups: new Map(), dirs: new Map(), entries: 0 };
}

/** The decompressed tar stream of a layer file, by its magic bytes (media types lie). */
export async function layerStream(file: string): Promise<AsyncIterable<Buffer>> {
  const fh = await open(file, 'r');
  const magic = Buffer.alloc(4);
  await fh.read(magic, 0, 4, 0).finally(() => fh.close());
  if (magic[0] === 0x1f && magic[1] === 0x8b) return createReadStream(file).pipe(createGunzip());
  if (magic.readUInt32LE(0) === 0xfd2fb528) return zstdStream(file);
  return createReadStream(file);
}

/** zstd through Debian's `zstd` binary: Node 20 has no zstd, and it is the reference decoder. */
async function* zstdStream(file: string): AsyncGenerator<Buffer> {
  const child = spawnTool('zstd', ['-dcq', '--', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });
  try {
    for await (const chunk of child.stdout!) yield chunk as Buffer;
    const code = await exited;
    if (toolMissing(code, stderr)) {
      throw new ForkdError(
        'setup_required',
        'a zstd layer needs the `zstd` program: apt-get install zstd',
      );
    }
    if (code !== 0)
      throw new ForkdError('blob_invalid', `a zstd layer does not decompress: ${stderr.trim()}`);
  } finally {
    if (child.exitCode === null) child.kill();
  }
}

/** Unpack one layer over the tree. */
export async function applyLayer(tree: Tree, tar: AsyncIterable<Buffer>): Promise<void> {
  const written = new Set<string>();
  const opaque: string[] = [];
  await readTar(tar, async (h, body) => {
    const path = clean(h.path);
    if (path === '') return applyDir(tree, '', h);
    const dir = posix.dirname(path);
    const base = posix.basename(path);
    const parent = await resolveDir(tree, dir === '.' ? '' : dir);
    if (base === OPAQUE) return void opaque.push(parent);
    if (base.startsWith(WHITEOUT))
      return removePath(tree, join1(parent, base.slice(WHITEOUT.length)));
    const target = join1(parent, base);
    markWritten(written, target);
    tree.entries++;
    await applyEntry(tree, target, h, body);
  });
  for (const dir of opaque) await emptyExcept(tree, dir, written);
}

/** Directory modes, owners and mtimes, deepest first, once all layers are in. */
export async function finishTree(tree: Tree): Promise<void> {
  const dirs = [...tree.dirs.entries()].sort((a, b) => b[0].length - a[0].length);
  for (const [path, h] of dirs) {
    const host = hostPath(tree, path);
    const mode = tree.asRoot ? h.mode : h.mode | 0o700;
    if (tree.asRoot) await lchown(host, h.uid, h.gid);
    await chmod(host, mode);
    await utimes(host, h.mtime, h.mtime);
    if (!tree.asRoot)
      setFixup(tree, path, { owner: { uid: h.uid, gid: h.gid, mode: TYPE_BITS.dir | h.mode } });
  }
}

async function applyEntry(
  tree: Tree,
  path: string,
  h: TarHeader,
  body: AsyncIterable<Buffer>,
): Promise<void> {
  if (h.type === 'dir') return applyDir(tree, path, h);
  await removePath(tree, path);
  const host = hostPath(tree, path);
  switch (h.type) {
    case 'file':
      await writeFileEntry(host, h, body, tree.asRoot);
      break;
    case 'symlink':
      await symlink(h.linkpath, host);
      if (tree.asRoot) await lchown(host, h.uid, h.gid);
      await lutimes(host, h.mtime, h.mtime);
      break;
    case 'link': {
      const target = join1(
        await resolveDir(tree, parentOf(clean(h.linkpath))),
        posix.basename(clean(h.linkpath)),
      );
      await link(hostPath(tree, target), host).catch((e: NodeJS.ErrnoException) => {
        throw new ForkdError(
          'image_format_unsupported',
          `a layer hard-links ${path} to ${h.linkpath}, which is not there (${e.code})`,
          { path },
        );
      });
      return; // shares the inode (and its fixups) with its target
    }
    case 'char':
    case 'block':
    case 'fifo': {
      // An empty file holds the place; the image gets the real node (fixups.ts).
      await (await open(host, 'wx', 0o600)).close();
      const kind = h.type === 'char' ? 'c' : h.type === 'block' ? 'b' : 'p';
      setFixup(tree, path, {
        device: { kind, major: h.devmajor, minor: h.devminor },
        owner: { uid: h.uid, gid: h.gid, mode: TYPE_BITS[h.type] | h.mode },
      });
      return;
    }
    default:
      tree.entries--;
      return;
  }
  const fix: Fixup = {};
  if (h.xattrs.size > 0) fix.xattrs = h.xattrs;
  if (!tree.asRoot) fix.owner = { uid: h.uid, gid: h.gid, mode: TYPE_BITS[h.type] | h.mode };
  if (fix.owner || fix.xattrs) setFixup(tree, path, fix);
}

async function writeFileEntry(
  host: string,
  h: TarHeader,
  body: AsyncIterable<Buffer>,
  asRoot: boolean,
): Promise<void> {
  const fh = await open(host, 'wx', 0o600);
  try {
    for await (const chunk of body) await fh.write(chunk);
    // chown before chmod: chown clears setuid/setgid. Unprivileged, keep it readable for mkfs.
    if (asRoot) await fh.chown(h.uid, h.gid);
    await fh.chmod(asRoot ? h.mode : h.mode | 0o600);
    await fh.utimes(h.mtime, h.mtime);
  } finally {
    await fh.close();
  }
}

async function applyDir(tree: Tree, path: string, h: TarHeader): Promise<void> {
  const host = hostPath(tree, path);
  const st = await lstat(host).catch(() => undefined);
  if (st && !st.isDirectory()) await removePath(tree, path);
  if (!st || !st.isDirectory()) await mkdir(host, { mode: 0o755 });
  tree.dirs.set(path, h);
  if (h.xattrs.size > 0) setFixup(tree, path, { xattrs: h.xattrs });
  tree.entries++;
}

/** Delete a path (a whole subtree for a dir) with everything recorded for it. */
async function removePath(tree: Tree, path: string): Promise<void> {
  await rm(hostPath(tree, path), { recursive: true, force: true });
  for (const map of [tree.fixups, tree.dirs] as Map<string, unknown>[]) {
    for (const k of map.keys()) if (k === path || k.startsWith(`${path}/`)) map.delete(k);
  }
}

/** An opaque dir keeps only what this layer put in it. */
async function emptyExcept(tree: Tree, dir: string, keep: Set<string>): Promise<void> {
  for (const name of await readdir(hostPath(tree, dir))) {
    const path = join1(dir, name);
    if (!keep.has(path)) await removePath(tree, path);
  }
}

function markWritten(written: Set<string>, path: string): void {
  for (let p = path; p !== '' && p !== '.'; p = parentOf(p)) written.add(p);
}

/**
 * The real directory an image path's parent names, following symlinks as the guest would
 * but never above the root; missing directories are made (root-owned 0755, as runtimes do).
 */
async function resolveDir(tree: Tree, dir: string, depth = 0): Promise<string> {
  let at = '';
  const parts = dir.split('/').filter(Boolean);
  for (let i = 0; i < parts.length; i++) {
    const next = join1(at, parts[i]!);
    const host = hostPath(tree, next);
    const st = await lstat(host).catch(() => undefined);
    if (!st) {
      await mkdir(host, { mode: 0o755 });
      if (!tree.asRoot)
        setFixup(tree, next, { owner: { uid: 0, gid: 0, mode: TYPE_BITS.dir | 0o755 } });
      at = next;
    } else if (st.isSymbolicLink()) {
      if (depth >= MAX_LINKS)
        throw new ForkdError(
          'image_format_unsupported',
          `too many symlinks resolving /${dir} in a layer`,
        );
      const target = await readlink(host);
      const resolved = clean(target.startsWith('/') ? target : posix.join(at, target));
      at = await resolveDir(tree, resolved, depth + 1);
    } else if (st.isDirectory()) {
      at = next;
    } else {
      throw new ForkdError(
        'image_format_unsupported',
        `a layer writes below /${next}, which is not a directory`,
        { path: next },
      );
    }
  }
  return at;
}

/** An image path, cleaned and clamped at the root: `../../etc` is `etc`. */
export function clean(p: string): string {
  return posix.normalize(`/${p}`).replace(/^\/+/, '').replace(/\/+$/, '');
}

function join1(dir: string, name: string): string {
  return dir === '' ? name : `${dir}/${name}`;
}

function parentOf(p: string): string {
  const d = posix.dirname(p);
  return d === '.' || d === '/' ? '' : d;
}

function hostPath(tree: Tree, path: string): string {
  return path === '' ? tree.root : join(tree.root, path);
}

function setFixup(tree: Tree, path: string, fix: Fixup): void {
  tree.fixups.set(path, { ...tree.fixups.get(path), ...fix });
}
