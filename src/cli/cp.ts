/**
 * `forkd cp SRC DST`: copy between this host and a sandbox, either way. The sandbox side is
 * written `ID:/path`; `-` is stdin or stdout. As with cp(1): a directory as the target
 * means "inside it"; a missing parent directory is an error (`-p` creates it, like
 * `mkdir -p`); a directory is copied only with `-r` (as a tar stream through the guest's
 * tar). Files stream both ways and are never held whole (cp-files.ts, cp-tree.ts).
 */
import type { Command } from 'commander';
import { Sandbox, type ClientConfig } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { downloadFile, uploadFile, type Copied } from './cp-files.js';
import { downloadTree, uploadTree } from './cp-tree.js';
import { action, printJson } from './output.js';
import { parseSandboxId, usage } from './parse.js';

/**
 * `sbx-0123456789ab:/etc/hosts`: a word and a colon first, as docker cp reads it (a local
 * path with a colon is written `./a:b`).
 */
const REMOTE = /^([A-Za-z0-9][A-Za-z0-9_-]*):(.*)$/;

/** The sandbox side of a copy. */
export interface Remote {
  sandbox: Sandbox;
  id: string;
  path: string;
}

/** What the two sides of a copy need to know about the flags. */
export interface CopyFlags extends DaemonFlags {
  recursive?: boolean;
  parents?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<src>', 'local path, -, or ID:/path')
      .argument('<dst>', 'local path, -, or ID:/path')
      .option('-r, --recursive', 'copy directories (their whole tree)')
      .option('-p, --parents', 'create missing directories of DST (like mkdir -p)')
      .option('--json', 'machine-readable output'),
  ).action(action(cp));
}

async function cp(src: string, dst: string, flags: CopyFlags): Promise<void> {
  const from = remoteOf(src);
  const to = remoteOf(dst);
  if (Boolean(from) === Boolean(to)) {
    throw usage(
      'one of SRC and DST must be a sandbox path (ID:/path), the other a local path or -',
    );
  }
  const config = clientConfig(flags);
  const copied = from
    ? await download(await connect(from, config), dst, flags)
    : await upload(src, await connect(to!, config), flags);
  if (flags.json) printJson(copied);
}

/** `ID:/path` → the id checked and the path; undefined for a local path. */
function remoteOf(arg: string): { id: string; path: string } | undefined {
  const m = REMOTE.exec(arg);
  if (!m) return undefined;
  const [, id = '', path = ''] = m;
  if (!path.startsWith('/')) {
    throw usage(`${arg}: the sandbox path must be absolute, like ${id}:/tmp/file`);
  }
  return { id: parseSandboxId(id), path };
}

async function connect(r: { id: string; path: string }, config: ClientConfig): Promise<Remote> {
  return { ...r, sandbox: await Sandbox.connect(r.id, config) };
}

async function upload(local: string, to: Remote, flags: CopyFlags): Promise<Copied> {
  if (flags.recursive && local !== '-') {
    const tree = await uploadTree(local, to, flags);
    if (tree) return tree;
  }
  return uploadFile(local, to, flags);
}

async function download(from: Remote, local: string, flags: CopyFlags): Promise<Copied> {
  const info = await from.sandbox.files.stat(from.path);
  if (info.kind === 'dir') {
    if (!flags.recursive) throw usage(`${from.id}:${from.path} is a directory (copy it with -r)`);
    return downloadTree(from, local, flags);
  }
  return downloadFile(from, info.mode, local, flags);
}
