/**
 * The doctor: what `forkd doctor` reports. One small check per prerequisite, each
 * returning pass / warn / fail with a fix that says what to run. FAIL means forkd cannot
 * boot a sandbox; WARN means it can, with something missing (speed, isolation, limits).
 */
import { constants } from 'node:fs';
import { access, readFile, statfs } from 'node:fs/promises';
import { release } from 'node:os';
import { basename, dirname } from 'node:path';
import type { Paths } from '../config.js';
import { isForkdError } from '../errors.js';
import { detectAccel } from '../drivers/qemu/accel.js';
import { QEMU_IMG } from '../drivers/qemu/disk.js';
import { probeLive } from '../drivers/qemu/live.js';
import {
  canSwitchUser,
  confinementSetting,
  jailSupport,
  seccompOption,
  VM_UID_BASE,
} from '../drivers/qemu/confine.js';
import { readKsm } from '../drivers/host/ksm.js';
import { vmTuning } from '../drivers/qemu/tuning.js';
import { run } from '../util/exec.js';
import { checkContainerd, checkRuntimeConfig, checkShim } from './containerd-checks.js';
import { locateGuest } from './guest.js';
import { NetworkManager } from './network/service.js';
import { cgroupParentName, memoryRoom, probeEnforcement } from './limits.js';
import { DEFAULT_IMAGE, getImage, hostBusybox } from './images/index.js';

export type CheckStatus = 'pass' | 'warn' | 'fail';

/** One line of the doctor's report. */
export interface CheckResult {
  id: string;
  status: CheckStatus;
  summary: string;
  /** What to do about a warn or fail. */
  fix?: string;
}

type Outcome = Omit<CheckResult, 'id'>;

interface Check {
  id: string;
  run(p: Paths): Promise<Outcome>;
}

const MIN_NODE = 20;
/** Debian 12's QEMU, the oldest forkd is measured and tested with (notes/). */
const QEMU: ToolSpec = {
  tool: 'qemu-system-x86_64',
  args: ['--version'],
  pattern: /version (\S+)(.*)/,
  min: [7, 2],
  pkg: 'qemu-system-x86',
  label: 'QEMU',
};
const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

const pass = (summary: string): Outcome => ({ status: 'pass', summary });
const warn = (summary: string, fix: string): Outcome => ({ status: 'warn', summary, fix });
const fail = (summary: string, fix: string): Outcome => ({ status: 'fail', summary, fix });

const CHECKS: Check[] = [
  { id: 'node', run: checkNode },
  { id: 'qemu', run: checkQemu },
  { id: basename(QEMU_IMG), run: checkQemuImg },
  { id: 'accel', run: checkAccel },
  { id: 'guest', run: checkGuest },
  { id: 'mkfs', run: checkMkfs },
  { id: 'busybox', run: checkBusybox },
  { id: 'debootstrap', run: checkDebootstrap },
  { id: 'image', run: checkDefaultImage },
  { id: 'disk', run: checkDisk },
  { id: 'cgroups', run: checkCgroups },
  { id: 'userfaultfd', run: checkUserfaultfd },
  { id: 'live-branch', run: checkLiveBranch },
  { id: 'confinement', run: checkConfinement },
  { id: 'memory-merging', run: checkMerging },
  { id: 'netns', run: checkNetns },
  { id: 'network', run: checkNetwork },
  { id: 'root', run: checkRoot },
  { id: 'containerd', run: () => checkContainerd() },
  { id: 'containerd-shim', run: () => checkShim() },
  { id: 'containerd-runtime', run: () => checkRuntimeConfig() },
];

/** The ids `runDoctor` reports, in order. */
export const CHECK_IDS: readonly string[] = CHECKS.map((c) => c.id);

/** Run every check (concurrently; they are independent). A check that throws fails. */
export function runDoctor(p: Paths): Promise<CheckResult[]> {
  return Promise.all(
    CHECKS.map(async (c) => {
      const outcome = await c
        .run(p)
        .catch((e: unknown) =>
          fail(
            e instanceof Error ? e.message : String(e),
            'see the message; then rerun `forkd doctor`',
          ),
        );
      return { id: c.id, ...outcome };
    }),
  );
}

async function checkNode(): Promise<Outcome> {
  const major = Number(process.versions.node.split('.')[0]);
  if (major >= MIN_NODE) return pass(`Node ${process.versions.node}`);
  return fail(`Node ${process.versions.node} is too old`, `install Node ${MIN_NODE} or newer`);
}

async function checkQemu(): Promise<Outcome> {
  const outcome = await checkTool(QEMU);
  if (outcome.status !== 'pass') return outcome;
  const { stdout } = await run(QEMU.tool, ['-machine', 'help']);
  if (/^microvm\s/m.test(stdout)) return outcome;
  return fail(`${QEMU.tool} lacks the microvm machine`, `apt-get install ${QEMU.pkg}`);
}

async function checkQemuImg(): Promise<Outcome> {
  return checkTool({
    tool: QEMU_IMG,
    args: ['--version'],
    pattern: /version (\S+)(.*)/,
    min: [0],
    pkg: 'qemu-utils',
    label: basename(QEMU_IMG),
  });
}

async function checkMkfs(): Promise<Outcome> {
  return checkTool({
    tool: 'mkfs.ext4',
    args: ['-V'],
    pattern: /mke2fs (\S+)(.*)/,
    // `mkfs.ext4 -d` appeared in e2fsprogs 1.43.
    min: [1, 43],
    pkg: 'e2fsprogs',
    label: 'mkfs.ext4',
  });
}

async function checkAccel(): Promise<Outcome> {
  const { accel, reason } = await detectAccel();
  if (accel === 'kvm') return pass(`KVM: ${reason}`);
  return warn(
    `runs under TCG, slower: ${reason}`,
    'for KVM speed use a host with VT-x/AMD-V and a read-write /dev/kvm; TCG works as is',
  );
}

async function checkGuest(p: Paths): Promise<Outcome> {
  try {
    const guest = await locateGuest(p);
    return pass(`kernel ${guest.kernelVersion}, initramfs with the agent`);
  } catch (e) {
    if (!isForkdError(e, 'setup_required')) throw e;
    return fail(e.message, 'run `forkd setup`');
  }
}

async function checkBusybox(): Promise<Outcome> {
  try {
    const busybox = await hostBusybox();
    return pass(`static BusyBox ${busybox.version} at ${busybox.path}`);
  } catch (e) {
    if (!isForkdError(e, 'setup_required')) throw e;
    return warn(e.message, 'apt-get install busybox-static (needed to build the busybox image)');
  }
}

async function checkDebootstrap(): Promise<Outcome> {
  const version = await toolVersion({
    tool: 'debootstrap',
    args: ['--version'],
    pattern: /debootstrap (\S+)(.*)/,
  });
  if (version) return pass(`debootstrap ${version.text}`);
  return warn(
    'debootstrap is not installed',
    'apt-get install debootstrap (only `forkd image build --debian` needs it)',
  );
}

async function checkDefaultImage(p: Paths): Promise<Outcome> {
  try {
    const image = await getImage(p, DEFAULT_IMAGE);
    return pass(`default image ${image.name} present`);
  } catch (e) {
    if (!isForkdError(e, 'image_not_found')) throw e;
    return warn(
      `no default image "${DEFAULT_IMAGE}"`,
      `run \`forkd setup\` or \`forkd image build --busybox --name ${DEFAULT_IMAGE}\``,
    );
  }
}

async function checkDisk(p: Paths): Promise<Outcome> {
  const dir = await nearestExisting(p.home);
  const s = await statfs(dir);
  const free = s.bavail * s.bsize;
  const summary = `${(free / GiB).toFixed(1)} GiB free for ${p.home}`;
  const fix = 'free space there, or point FORKD_HOME at a larger filesystem';
  if (free < 1 * GiB) return fail(summary, fix);
  if (free < 5 * GiB) return warn(summary, fix);
  return pass(summary);
}

/**
 * Per-sandbox limits: the same probe the daemon runs (a cgroup made under this process's,
 * given a memory, CPU and pids limit, and removed), so the doctor says what the daemon will
 * enforce, and where.
 */
async function checkCgroups(p: Paths): Promise<Outcome> {
  const e = await probeEnforcement(cgroupParentName(p.home));
  if (e.version === null) {
    return warn(
      `sandboxes run without resource limits: ${e.reason}`,
      'run forkd as root on a host with cgroup v2 (memory, cpu, pids delegated to its cgroup) or the v1 memory, cpu and pids hierarchies mounted writable',
    );
  }
  const dirs = Object.entries(e.layout.dirs).map(([c, dir]) => `${c} ${dir}`);
  const where = e.version === 'v2' ? (e.layout.dirs.memory as string) : dirs.join(', ');
  return pass(
    `cgroup ${e.version} enforces memory (QEMU process), cpu (quota in cores) and pids (QEMU threads) limits; ${e.version === 'v2' ? 'controllers memory, cpu, pids under' : 'hierarchies'} ${where}`,
  );
}

async function checkUserfaultfd(): Promise<Outcome> {
  const fix = 'sysctl -w vm.unprivileged_userfaultfd=1, or run forkd as root with CAP_SYS_PTRACE';
  const sysctl = await readFile('/proc/sys/vm/unprivileged_userfaultfd', 'utf8').catch(
    () => undefined,
  );
  if (sysctl === undefined) {
    return warn('the kernel exposes no userfaultfd setting', 'use Linux 5.2 or newer');
  }
  if (sysctl.trim() === '1') return pass('userfaultfd allowed for every user');
  if (await hasCapability(CAP_SYS_PTRACE)) return pass('userfaultfd allowed (CAP_SYS_PTRACE)');
  if (await canAccess('/dev/userfaultfd', constants.R_OK | constants.W_OK)) {
    return pass('userfaultfd allowed through /dev/userfaultfd');
  }
  return warn('userfaultfd is restricted to privileged processes', fix);
}

/**
 * Live branch (`--mode live`) runs its whole sequence on a test process: ptrace + fork. The
 * memory it lends its source for the copy (docs/limits.md) is what the guest has written,
 * up to its RAM: what the host and the cgroups above the sandboxes can give is shown.
 */
async function checkLiveBranch(p: Paths): Promise<Outcome> {
  const probe = await probeLive();
  if (probe.available) {
    const room = await memoryRoom(
      await probeEnforcement(cgroupParentName(p.home)),
      cgroupParentName(p.home),
    );
    const free = Number.isFinite(room.bytes) ? `${Math.floor(room.bytes / MiB)} MiB` : 'no limit';
    return pass(
      `live branch available (test fork by ptrace injection: ${probe.fork_ms.toFixed(2)} ms); during its copy a source may use as much memory again as its guest wrote (up to its RAM), lent over its limit: ${free} free now (${room.where})`,
    );
  }
  return warn(
    `live branch unavailable: ${probe.reason}; branches use mode copy (the pause grows with written memory)`,
    'allow ptrace of QEMU by forkd (root or CAP_SYS_PTRACE; kernel.yama.ptrace_scope ≤ 2; in a container, a seccomp profile that allows ptrace); x86_64 hosts only',
  );
}

async function checkNetns(): Promise<Outcome> {
  const fallback =
    "nat networking falls back to QEMU user networking in the daemon's namespace: the host's loopback (10.0.2.2) and network are reachable, no egress policy";
  if (process.getuid?.() !== 0) return warn(`not root: ${fallback}`, 'run forkd as root');
  try {
    await run('unshare', ['--net', 'true']);
    return pass('network namespaces work (unshare --net)');
  } catch (e) {
    return warn(
      `cannot create a network namespace (${e instanceof Error ? e.message : e}): ${fallback}`,
      'allow unshare(CLONE_NEWNET) for forkd (CAP_SYS_ADMIN; in a container, drop its seccomp filter)',
    );
  }
}

/** Which network mode `nat` sandboxes get here: their own namespace with nftables, or user. */
async function checkNetwork(): Promise<Outcome> {
  const { isolation, reason } = await NetworkManager.detect();
  if (isolation === 'netns') return pass(`nat mode: ${reason}`);
  return warn(
    `nat mode: ${reason}; egress policies are not enforced`,
    'run the daemon as root with nftables installed (apt-get install nftables)',
  );
}

/** How sandboxes' QEMU will be confined (docs/security.md); each sandbox's is in its info. */
async function checkConfinement(): Promise<Outcome> {
  const filter = `-sandbox ${seccompOption(true)} (spawn=deny under --branch-mode copy)`;
  if (!confinementSetting().enabled) {
    return warn(
      "QEMU runs unconfined: no seccomp filter, as the daemon's user (FORKD_CONFINE=off or --no-confine)",
      'unset FORKD_CONFINE and drop --no-confine once done debugging',
    );
  }
  if (!canSwitchUser()) {
    return warn(
      `QEMU runs under ${filter} but as the daemon's user: no uid of its own per sandbox, no jail`,
      "run the daemon as root to give each sandbox's QEMU its own uid, no capabilities and a jail",
    );
  }
  const head = `QEMU runs under ${filter}, as a uid of its own per sandbox (from ${VM_UID_BASE}), no capabilities, owning only its sandbox directory`;
  if (!confinementSetting().jail) {
    return warn(
      `${head}; not jailed: turned off (FORKD_QEMU_JAIL=off)`,
      'unset FORKD_QEMU_JAIL once done debugging',
    );
  }
  const jail = await jailSupport();
  if (!jail.ok) {
    return warn(
      `${head}; not jailed: ${jail.reason}`,
      'allow mount namespaces for forkd (CAP_SYS_ADMIN; in a container, drop its seccomp filter or AppArmor profile)',
    );
  }
  return pass(`${head}, jailed in ${jail.reason} (its root holds only its own files)`);
}

/** PR_SET_MEMORY_MERGE came with Linux 6.4 (inherited across exec from 6.7). */
function kernelMerges(rel = release()): boolean {
  const [major = 0, minor = 0] = rel.split('.').map(Number);
  return major > 6 || (major === 6 && minor >= 7);
}

/** The TCG buffer cap, whether sandboxes' pages are merged, and KSM's state (docs/idle.md). */
async function checkMerging(): Promise<Outcome> {
  const t = vmTuning();
  const ksm = await readKsm();
  const ksmText = ksm
    ? `KSM ${ksm.running ? `running (${ksm.pagesToScan} pages / ${ksm.sleepMs} ms, ${ksm.pagesSharing} pages sharing)` : 'off'}`
    : 'no KSM in this kernel';
  const head = `TCG buffer ${t.tbMiB ? `capped at ${t.tbMiB} MiB` : 'uncapped (1 GiB)'} per QEMU; merging ${t.merge}; ${ksmText}`;
  if (t.merge === 'off') return pass(head);
  if (!ksm || !kernelMerges()) {
    return warn(
      `${head}: Linux ${release()} cannot merge QEMU's pages`,
      'run on Linux 6.7 or newer with CONFIG_KSM, or drop --merge-memory',
    );
  }
  if (!ksm.running) {
    return warn(
      `${head}: nothing is merged until ksmd runs`,
      'start the daemon as root (it turns ksmd on) or `echo 1 > /sys/kernel/mm/ksm/run`',
    );
  }
  return pass(head);
}

async function checkRoot(): Promise<Outcome> {
  if (process.getuid?.() === 0) return pass('running as root');
  return warn(
    'not root: no Debian image builds, cgroup limits or per-sandbox network namespaces',
    'run forkd as root for those (sandboxes still boot without)',
  );
}

type Version = number[];

/** A host tool, how to read its version, the oldest that works and its Debian package. */
interface ToolSpec {
  tool: string;
  args: string[];
  /** Group 1: the dotted version; group 2: the rest of the line (build details). */
  pattern: RegExp;
  min: Version;
  pkg: string;
  label: string;
}

/** Pass with the tool's version, or fail saying which package to install. */
async function checkTool(spec: ToolSpec): Promise<Outcome> {
  const version = await toolVersion(spec);
  const need = spec.min.join('.');
  if (!version) return fail(`${spec.tool} not found on PATH`, `apt-get install ${spec.pkg}`);
  if (!atLeast(version.numbers, spec.min)) {
    return fail(
      `${spec.tool} ${version.text} is older than ${need}`,
      `install ${spec.pkg} ${need} or newer`,
    );
  }
  return pass(`${spec.label} ${version.text}`);
}

/** A tool's version from its output, or undefined when the tool is not installed. */
async function toolVersion(
  spec: Pick<ToolSpec, 'tool' | 'args' | 'pattern'>,
): Promise<{ numbers: Version; text: string } | undefined> {
  try {
    const { stdout, stderr } = await run(spec.tool, spec.args);
    const m = spec.pattern.exec(stdout + stderr);
    if (!m?.[1]) return { numbers: [], text: 'unknown version' };
    const numbers = m[1].split('.').map((n) => parseInt(n, 10) || 0);
    return { numbers, text: (m[1] + (m[2] ?? '')).trim() };
  } catch (e) {
    if (isForkdError(e, 'setup_required')) return undefined;
    throw e;
  }
}

function atLeast(have: Version, min: Version): boolean {
  for (let i = 0; i < min.length; i++) {
    const h = have[i] ?? 0;
    const m = min[i] ?? 0;
    if (h !== m) return h > m;
  }
  return true;
}

async function canAccess(path: string, mode = constants.F_OK): Promise<boolean> {
  return access(path, mode).then(
    () => true,
    () => false,
  );
}

const CAP_SYS_PTRACE = 19;

async function hasCapability(cap: number): Promise<boolean> {
  const status = await readFile('/proc/self/status', 'utf8').catch(() => '');
  const hex = /^CapEff:\s*([0-9a-f]+)/m.exec(status)?.[1];
  return hex !== undefined && (BigInt(`0x${hex}`) & (1n << BigInt(cap))) !== 0n;
}

/** FORKD_HOME may not exist yet; its filesystem is that of its nearest existing parent. */
async function nearestExisting(path: string): Promise<string> {
  for (let dir = path; ; dir = dirname(dir)) {
    if ((await canAccess(dir)) || dir === dirname(dir)) return dir;
  }
}
