/**
 * Guest users for the file calls: who a user name is in the guest (`/etc/passwd`: uid, gid,
 * home), who owns a file (uid and gid, named from `/etc/passwd` and `/etc/group`), and
 * handing what a call created to the user it names. The agent's file requests run as root
 * and report no owner, so the owner is set and read with the guest's own `chown` and `stat`
 * (coreutils or busybox): one command per call, only when a user other than root is named
 * or an owner is asked for.
 */
import { posix } from 'node:path';
import type { AgentClient } from '../../drivers/agent/client.js';
import { ForkdError, isForkdError } from '../../errors.js';

export interface GuestUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

export interface Owner {
  owner: string;
  group: string;
}

/** `name:x:uid:gid:gecos:home:shell` lines → entries; `/etc/group` has name:x:gid. */
function table(text: string): string[][] {
  return text
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => l.split(':'));
}

async function readGuestFile(agent: AgentClient, path: string): Promise<string> {
  return (await agent.readFile(path).catch(() => Buffer.alloc(0))).toString('utf8');
}

const ROOT: GuestUser = { name: 'root', uid: 0, gid: 0, home: '/root' };

/** The guest's user `spec` (a name or a uid); a name it does not know is the caller's error. */
export async function guestUser(agent: AgentClient, spec: string): Promise<GuestUser> {
  const rows = table(await readGuestFile(agent, '/etc/passwd'));
  const numeric = /^\d+$/.test(spec);
  const row = rows.find((r) => (numeric ? r[2] === spec : r[0] === spec));
  if (row) {
    return { name: row[0] ?? spec, uid: Number(row[2]), gid: Number(row[3]), home: row[5] || '/' };
  }
  if (spec === 'root' || spec === '0') return ROOT;
  if (numeric) return { name: spec, uid: Number(spec), gid: Number(spec), home: '/' };
  throw new ForkdError('bad_request', `user ${spec.slice(0, 64)}: not in the guest's /etc/passwd`, {
    field: 'user',
    reason: 'no such user',
  });
}

const isRoot = (u: GuestUser): boolean => u.uid === 0;

/** Root: the agent's own file calls already act as root. */
export const isRootSpec = (spec: string): boolean => spec === 'root' || spec === '0';

/** Run a root command in the guest; a failure is a guest error naming it. */
async function mustRun(agent: AgentClient, argv: string[], what: string): Promise<string> {
  const r = await agent.run({ argv, user: 'root' });
  if (r.exitCode !== 0) {
    const why = r.stderr.toString('utf8').trim().slice(0, 300);
    throw new ForkdError('guest_error', `${what} failed: ${why}`);
  }
  return r.stdout.toString('utf8');
}

/**
 * The directories of `dir` and its ancestors that do not exist yet (outermost first): what
 * a mkdir with parents, or a write into `dir`, creates; found before the call so they can
 * be handed to its user after it (and a directory that was there keeps its owner).
 */
export async function missingDirs(agent: AgentClient, dir: string): Promise<string[]> {
  const missing: string[] = [];
  for (let d = posix.resolve('/', dir); d !== '/'; d = posix.dirname(d)) {
    const found = await agent.stat(d).then(
      () => true,
      (e: unknown) => {
        if (isForkdError(e) && e.code === 'guest_file_not_found') return false;
        throw e;
      },
    );
    if (found) break;
    missing.unshift(d);
  }
  return missing;
}

/** Give `paths` (just created by a root call) to `user`; nothing to do for root. */
export async function handOver(agent: AgentClient, user: GuestUser, paths: string[]) {
  if (isRoot(user) || !paths.length) return;
  await mustRun(agent, ['chown', `${user.uid}:${user.gid}`, '--', ...paths], 'chown');
}

/** At most this many paths per `stat` command (bounded argv). */
const STAT_BATCH = 500;

/** The owner and group names of `paths` (a uid without a name is its number). */
export async function ownersOf(agent: AgentClient, paths: string[]): Promise<Owner[]> {
  if (!paths.length) return [];
  const [passwd, group] = await Promise.all([
    readGuestFile(agent, '/etc/passwd'),
    readGuestFile(agent, '/etc/group'),
  ]);
  const names = (rows: string[][]) => new Map(rows.map((r) => [r[2] ?? '', r[0] ?? '']));
  const users = names(table(passwd));
  const groups = names(table(group));
  const out: Owner[] = [];
  for (let i = 0; i < paths.length; i += STAT_BATCH) {
    const batch = paths.slice(i, i + STAT_BATCH);
    const text = await mustRun(agent, ['stat', '-c', '%u %g', '--', ...batch], 'stat');
    for (const line of text.trim().split('\n')) {
      const [uid = '', gid = ''] = line.split(' ');
      out.push({ owner: users.get(uid) ?? uid, group: groups.get(gid) ?? gid });
    }
  }
  return out;
}
