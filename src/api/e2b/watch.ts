/**
 * envd's filesystem.Filesystem/WatchDir (`files.watchDir`) by polling: forkd's guest agent
 * has no inotify channel, so the listener lists the directory (its tree when recursive)
 * every POLL_MS and reports what changed as envd's events — a new entry is CREATE (a new
 * non-empty file also WRITE), a changed size or mtime WRITE, a changed mode CHMOD, a gone
 * entry REMOVE (a rename shows as REMOVE + CREATE). Names are relative to the watched
 * directory, as envd's are. A change undone within one poll is not seen; a watched sandbox
 * counts as in use, so it is not paused while the watch lasts.
 */
import { posix } from 'node:path';
import type { FileStatT } from '../../contract/schemas.js';
import type { Services } from '../../services/contracts.js';
import { entryInfo } from './filesystem.js';
import type { StreamOut } from './rpc.js';
import { ConnectFailure } from './wire.js';

const POLL_MS = 300;
/** A recursive watch's bounds: how deep, how many entries per poll. */
const MAX_DEPTH = 32;
const MAX_ENTRIES = 10_000;

type Tree = Map<string, FileStatT>;

export interface WatchSpec {
  dir: string;
  recursive: boolean;
  includeEntry: boolean;
}

async function scan(services: Services, sandbox: string, spec: WatchSpec): Promise<Tree> {
  const tree: Tree = new Map();
  const visit = async (rel: string, depth: number): Promise<void> => {
    for (const s of await services.sandboxes.listFiles(sandbox, posix.join(spec.dir, rel))) {
      if (tree.size >= MAX_ENTRIES) {
        throw new ConnectFailure('resource_exhausted', `more than ${MAX_ENTRIES} entries to watch`);
      }
      const name = rel ? `${rel}/${s.name}` : s.name;
      tree.set(name, s);
      if (s.kind === 'dir' && spec.recursive && depth < MAX_DEPTH) await visit(name, depth + 1);
    }
  };
  await visit('', 1);
  return tree;
}

type EventType = 'CREATE' | 'WRITE' | 'REMOVE' | 'CHMOD';

/** What changed from `before` to `now`, in envd's event types. */
export function changes(before: Tree, now: Tree): [string, EventType][] {
  const out: [string, EventType][] = [];
  for (const [name, s] of now) {
    const was = before.get(name);
    if (!was) {
      out.push([name, 'CREATE']);
      if (s.kind === 'file' && s.size > 0) out.push([name, 'WRITE']);
      continue;
    }
    if (s.kind === 'file' && (s.size !== was.size || s.mtime_ms !== was.mtime_ms)) {
      out.push([name, 'WRITE']);
    }
    if (s.mode !== was.mode) out.push([name, 'CHMOD']);
  }
  for (const name of before.keys()) if (!now.has(name)) out.push([name, 'REMOVE']);
  return out;
}

/**
 * Streams the directory's changes to `out` until the client goes away (WatchDirResponse's
 * oneof is the message itself: `{start}`, `{filesystem}`, `{keepalive}`).
 */
export async function watchDir(
  services: Services,
  sandbox: string,
  spec: WatchSpec,
  out: StreamOut,
): Promise<void> {
  const stat = await services.sandboxes.statFile(sandbox, spec.dir);
  if (stat.kind !== 'dir') {
    throw new ConnectFailure('invalid_argument', `path ${spec.dir} is not a directory`);
  }
  let before = await scan(services, sandbox, spec);
  out.send({ start: {} });
  while (!out.isClosed()) {
    await Promise.race([new Promise((r) => setTimeout(r, POLL_MS)), out.closed]);
    if (out.isClosed()) return;
    const now = await scan(services, sandbox, spec);
    for (const [name, type] of changes(before, now)) {
      const s = now.get(name);
      const event: Record<string, unknown> = { name, type: `EVENT_TYPE_${type}` };
      if (spec.includeEntry && s) event.entry = entryInfo(s, posix.join(spec.dir, name));
      out.send({ filesystem: event });
    }
    before = now;
  }
}
