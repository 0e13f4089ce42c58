/**
 * QEMU confined (docs/security.md): every QEMU runs under its own seccomp filter
 * (`-sandbox`), and, when the daemon is root, as a uid of its own with no capabilities,
 * owning only its sandbox's directory. A guest that escapes into QEMU then holds a process
 * that cannot open another sandbox's files, gain privileges or load a kernel module.
 *
 * The uid is not allocated: it is a fixed base plus the inode number of the sandbox's
 * directory, unique on its filesystem while the directory exists, so concurrent forks,
 * pools, several daemons and a daemon restart need no table. QEMU 7.2 takes it as
 * `-runas uid:gid` and drops to it after opening its memory file, disks and sockets as
 * root (the snapshot's memory file stays root's and is mapped private, never written).
 *
 * When the daemon is root QEMU is also jailed: the launcher (native/jail.c) starts it in a
 * mount and an IPC namespace of its own whose root holds only its directory, its memory
 * file, its kernel, its disk chain, QEMU's own files under /usr and a few devices.
 */
import { execFile } from 'node:child_process';
import { chmod, chown, readdir, readFile, readlink, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type { VmSpec } from './cmdline.js';
import { QEMU_EXEC_BINARY, qemuLibsDir } from './tuning.js';

/** How sandboxes' QEMU is confined; the daemon sets it once (`--confine`, FORKD_CONFINE). */
export interface ConfineSetting {
  /** Off only for debugging: QEMU then runs as the daemon's user with no filter. */
  enabled: boolean;
  /**
   * Whether QEMU's filter allows process creation: a live branch injects a clone() into
   * QEMU, so only a daemon whose branches are all `copy` denies it.
   */
  spawn: boolean;
  /** Whether QEMU is jailed (a mount and IPC namespace) where the host allows it. */
  jail: boolean;
}

let setting: ConfineSetting = {
  enabled: confineFromEnv(),
  spawn: true,
  jail: confineFromEnv(process.env, 'FORKD_QEMU_JAIL'),
};

/**
 * FORKD_CONFINE=off (or 0, false) turns confinement off; FORKD_QEMU_JAIL=off only the
 * jail (debugging; benches compare the two).
 */
export function confineFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  name: 'FORKD_CONFINE' | 'FORKD_QEMU_JAIL' = 'FORKD_CONFINE',
): boolean {
  return !['off', '0', 'false', 'no'].includes((env[name] ?? '').toLowerCase());
}

/** Set how QEMU started from now on is confined (already running ones keep theirs). */
export function configureConfinement(s: Partial<ConfineSetting>): void {
  setting = { ...setting, ...s };
}

export function confinementSetting(): ConfineSetting {
  return setting;
}

/** The first uid of sandboxes' QEMU; FORKD_VM_UID_BASE moves the range. */
export const VM_UID_BASE = Number(process.env.FORKD_VM_UID_BASE ?? 0x70000000);
/** Inode numbers are folded into this many uids (below 2^31: no tool sees them negative). */
const VM_UID_SPAN = 0x0fffffff;

/** The uid (and gid) of the QEMU whose directory has inode `ino`. */
export function vmUid(ino: number): number {
  return VM_UID_BASE + (ino % VM_UID_SPAN);
}

/**
 * QEMU's `-sandbox` option: the narrowest QEMU 7.2 offers that keeps every feature.
 * `elevateprivileges` must stay allowed because QEMU itself calls setuid for `-runas`
 * after the filter is in place (deny kills it there); once dropped, every uid and gid of
 * the process is the sandbox's and no_new_privs is set, so set*id can only name itself.
 */
export function seccompOption(spawn: boolean): string {
  return `on,obsolete=deny,elevateprivileges=allow,spawn=${spawn ? 'allow' : 'deny'},resourcecontrol=deny`;
}

/** True when the daemon can start QEMU as another user. */
export function canSwitchUser(): boolean {
  return process.getuid?.() === 0;
}

/** Whether this host can jail QEMU, and if not why (asked once: a launcher's trial run). */
export interface JailSupport {
  ok: boolean;
  reason: string;
}

let jailProbe: Promise<JailSupport> | undefined;

/**
 * Try the jail once (the launcher jails `true`): it needs root (CAP_SYS_ADMIN for
 * unshare and mount) and a kernel and container that allow mount namespaces.
 */
export function jailSupport(): Promise<JailSupport> {
  if (!canSwitchUser()) {
    return Promise.resolve({ ok: false, reason: 'the daemon is not root (no mount namespaces)' });
  }
  jailProbe ??= promisify(execFile)(QEMU_EXEC_BINARY, ['--jail', '--', 'true'], {
    timeout: 10_000,
  }).then(
    () => ({ ok: true, reason: 'a mount and an IPC namespace per QEMU' }),
    (e: { stderr?: string; message: string }) => ({
      ok: false,
      reason: (e.stderr ?? '').trim() || e.message,
    }),
  );
  return jailProbe;
}

/** What QEMU's command line and its launcher's get, to confine one VM. */
export interface VmConfinement {
  qemu: string[];
  launcher: string[];
}

/** The files a VM's jail holds, each at its host path (native/jail.c adds QEMU's own). */
export function jailArgs(
  spec: Pick<VmSpec, 'dir' | 'memPath' | 'disk' | 'boot'>,
  libs = qemuLibsDir(),
): string[] {
  const args = ['--jail', '--rw', spec.dir];
  // QEMU 7.2 opens its memory file read-write (mapped private, never written through).
  if (!spec.memPath.startsWith('/dev/')) args.push('--rw', spec.memPath);
  if (spec.boot) args.push('--ro', spec.boot.kernel, '--ro', spec.boot.initramfs);
  if (libs) args.push('--ro', libs); // the libraries QEMU loads instead of /usr's (tuning.ts)
  return [...args, '--chain', spec.disk];
}

/**
 * Prepare a VM's directory for its confined QEMU and return the arguments that confine
 * it: the directory and its disk layers become the VM's uid's, mode 0700, and
 * its ancestors traversable (search only) so QEMU can reach its own files by path later;
 * the launcher jails it when the host allows.
 */
export async function confineVm(
  spec: Pick<VmSpec, 'dir' | 'memPath' | 'disk' | 'boot'>,
): Promise<VmConfinement> {
  if (!setting.enabled) return { qemu: [], launcher: [] };
  const args = ['-sandbox', seccompOption(setting.spawn)];
  if (!canSwitchUser()) return { qemu: args, launcher: [] };
  const { dir } = spec;
  const id = vmUid((await stat(dir)).ino);
  // Its disk layers only: the files the daemon reads back (the owner file) stay ours.
  await Promise.all(
    (await readdir(dir, { withFileTypes: true }))
      .filter((e) => e.isFile() && e.name.endsWith('.qcow2'))
      .map((e) => chown(join(dir, e.name), id, id)),
  );
  await chown(dir, id, id);
  await chmod(dir, 0o700);
  await searchable(dirname(dir));
  const jailed = setting.jail && (await jailSupport()).ok;
  return { qemu: [...args, '-runas', `${id}:${id}`], launcher: jailed ? jailArgs(spec) : [] };
}

const searchableDirs = new Set<string>();

/** Give `dir` and its ancestors the search bit for others (never read or write). */
async function searchable(dir: string): Promise<void> {
  for (let d = dir; !searchableDirs.has(d); d = dirname(d)) {
    const { mode } = await stat(d);
    if (!(mode & 0o001)) await chmod(d, (mode & 0o7777) | 0o001);
    searchableDirs.add(d);
    if (d === dirname(d)) break;
  }
}

/** Give a file made in a VM's directory (a new disk layer) to the directory's owner. */
export async function ownLikeDir(file: string): Promise<void> {
  const st = await stat(dirname(file));
  if (st.uid !== process.getuid?.()) await chown(file, st.uid, st.gid);
}

/**
 * Close FORKD_HOME to sandboxes' uids: they may pass through it (search) to reach their
 * own directory, but read nothing else in it — snapshots (guest memory), images, the
 * database and tokens lose every permission for others.
 */
export async function protectHome(home: string, sandboxes: string): Promise<void> {
  if (!setting.enabled || !canSwitchUser()) return;
  for (const e of await readdir(home, { withFileTypes: true }).catch(() => [])) {
    const path = join(home, e.name);
    if (path === sandboxes || !(e.isFile() || e.isDirectory())) continue;
    const { mode } = await stat(path);
    if (mode & 0o007) await chmod(path, mode & 0o7770);
  }
  for (const d of [home, sandboxes]) {
    const { mode } = await stat(d).catch(() => ({ mode: -1 }));
    if (mode >= 0 && (mode & 0o007) !== 0o001) await chmod(d, (mode & 0o7770) | 0o001);
  }
}

/** What confines one running QEMU, read from the kernel (/proc), not from our settings. */
export interface Confinement {
  /** Its effective uid. */
  uid: number;
  /** Seccomp mode 2 (a filter) is in force. */
  seccomp: boolean;
  /** Its `-sandbox` option, null when it has none. */
  sandbox: string | null;
  /** Whether its filter lets it create processes (what a live branch needs). */
  spawn: boolean;
  /** Effective capabilities, as the kernel prints them (16 hex digits; all 0: none). */
  capabilities: string;
  noNewPrivs: boolean;
  /** The namespaces it has of its own beside the network's (its jail): `mount`, `ipc`. */
  namespaces: JailNamespace[];
}

export type JailNamespace = 'mount' | 'ipc';
const JAIL_NAMESPACES: [JailNamespace, string][] = [
  ['mount', 'mnt'],
  ['ipc', 'ipc'],
];

/** The confinement of QEMU `pid`, or undefined once it is gone. */
export async function confinementOf(pid: number): Promise<Confinement | undefined> {
  const [status, cmdline, namespaces] = await Promise.all([
    readFile(`/proc/${pid}/status`, 'utf8').catch(() => ''),
    readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => ''),
    ownNamespaces(pid),
  ]);
  if (!status) return undefined;
  return { ...parseConfinement(status, cmdline), namespaces };
}

/** The namespaces of `pid` that differ from the daemon's own (read as ns links). */
async function ownNamespaces(pid: number): Promise<JailNamespace[]> {
  const own = await Promise.all(
    JAIL_NAMESPACES.map(async ([name, file]) => {
      const [theirs, ours] = await Promise.all([
        readlink(`/proc/${pid}/ns/${file}`).catch(() => ''),
        readlink(`/proc/self/ns/${file}`).catch(() => ''),
      ]);
      return theirs && ours && theirs !== ours ? name : undefined;
    }),
  );
  return own.filter((n): n is JailNamespace => n !== undefined);
}

/** {@link confinementOf} from the text of /proc/PID/status and /proc/PID/cmdline. */
export function parseConfinement(status: string, cmdline: string): Omit<Confinement, 'namespaces'> {
  const field = (name: string): string =>
    new RegExp(`^${name}:\\s*(.*)$`, 'm').exec(status)?.[1]?.trim() ?? '';
  const argv = cmdline.split('\0');
  const at = argv.indexOf('-sandbox');
  const sandbox = at >= 0 ? (argv[at + 1] ?? '') : null;
  const seccomp = field('Seccomp') === '2';
  return {
    uid: Number(field('Uid').split(/\s+/)[1] ?? -1),
    seccomp,
    sandbox,
    spawn: !seccomp || (sandbox !== null && !/(^|,)spawn=deny(,|$)/.test(sandbox)),
    capabilities: field('CapEff') || '0000000000000000',
    noNewPrivs: field('NoNewPrivs') === '1',
  };
}
