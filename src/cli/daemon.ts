/**
 * `forkd daemon`: run the daemon in the foreground (systemd runs it as is, see
 * packaging/forkd.service). SIGTERM or SIGINT drain requests and stop it; sandboxes keep
 * running and are re-adopted by the next start.
 */
import type { Command } from 'commander';
import { ForkdError } from '../errors.js';
import { startDaemon, type DaemonOptions } from '../daemon/daemon.js';
import {
  parseMerge,
  parseTbMiB,
  POOL_BUDGET_MAX,
  type PoolBudgetLimits,
} from '../services/local.js';
import { POOL_MAX } from '../contract/rules.js';
import type { LogLevel } from '../daemon/log.js';
import { action } from './output.js';

/** The daemon's options as commander hands them over (numbers still text). */
type DaemonFlags = Pick<
  DaemonOptions,
  | 'socket'
  | 'listen'
  | 'tlsCert'
  | 'tlsKey'
  | 'tokenFile'
  | 'auditFile'
  | 'e2bListen'
  | 'dnsUpstream'
  | 'podSnapshots'
> & {
  maxBooting?: string;
  maxExecs?: string;
  imageCacheTtl?: string;
  defaultMemory?: string;
  defaultCpu?: string;
  defaultPids?: string;
  pauseIdleAfter?: string;
  hibernateIdleAfter?: string;
  tcgTbMib?: string;
  mergeMemory?: string;
  defaultPool?: string;
  poolBudgetVms?: string;
  poolBudgetMib?: string;
  branchMode: string;
  logLevel: string;
  confine?: boolean;
  acceptUnenforced?: boolean;
};

const BRANCH_MODES = ['auto', 'copy', 'live'] as const;

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function positiveInt(flag: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) {
    throw new ForkdError('bad_request', `${flag} must be a positive integer, not "${text}"`);
  }
  return n;
}

/** An environment switch: 1, true, yes or on. */
function truthy(v: string | undefined): boolean {
  return ['1', 'true', 'yes', 'on'].includes((v ?? '').toLowerCase());
}

/** A whole number from 0 to `max`. */
function boundedInt(flag: string, text: string | undefined, max: number): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0 || n > max) {
    throw new ForkdError(
      'bad_request',
      `${flag} must be a whole number from 0 to ${max}, not "${text}"`,
    );
  }
  return n;
}

/** `--pool-budget-vms` and `--pool-budget-mib`, where given (the rest from the environment). */
function poolBudgetFlags(flags: DaemonFlags): Partial<PoolBudgetLimits> {
  const vms = boundedInt('--pool-budget-vms', flags.poolBudgetVms, POOL_BUDGET_MAX.vms);
  const mib = boundedInt('--pool-budget-mib', flags.poolBudgetMib, POOL_BUDGET_MAX.mib);
  return {
    ...(vms === undefined ? {} : { vms }),
    ...(mib === undefined ? {} : { memoryBytes: mib * 1024 * 1024 }),
  };
}

/** The longest idle time a daemon flag takes: a year, in seconds. */
const IDLE_MAX_S = 365 * 24 * 3600;

function toOptions(flags: DaemonFlags): DaemonOptions {
  if (!LEVELS.includes(flags.logLevel)) {
    throw new ForkdError('bad_request', `--log-level must be one of ${LEVELS.join(', ')}`);
  }
  const branchMode = BRANCH_MODES.find((m) => m === flags.branchMode);
  if (!branchMode) {
    throw new ForkdError('bad_request', `--branch-mode must be one of ${BRANCH_MODES.join(', ')}`);
  }
  return {
    socket: flags.socket,
    listen: flags.listen,
    tlsCert: flags.tlsCert,
    tlsKey: flags.tlsKey,
    tokenFile: flags.tokenFile,
    auditFile: flags.auditFile,
    e2bListen: flags.e2bListen,
    dnsUpstream: flags.dnsUpstream,
    podSnapshots: flags.podSnapshots,
    imageCacheTtlS: positiveInt('--image-cache-ttl', flags.imageCacheTtl),
    maxBooting: positiveInt('--max-booting', flags.maxBooting),
    maxExecs: positiveInt('--max-execs', flags.maxExecs),
    branchMode,
    logLevel: flags.logLevel as LogLevel,
    limitDefaults: { memory: flags.defaultMemory, cpu: flags.defaultCpu, pids: flags.defaultPids },
    ...(flags.confine === false ? { confine: false } : {}),
    acceptUnenforced:
      flags.acceptUnenforced === true || truthy(process.env.FORKD_ACCEPT_UNENFORCED),
    // 0: never (the daemon's defaults are 60 and 3600: docs/idle.md "The default policy").
    pauseIdleAfterS: boundedInt('--pause-idle-after', flags.pauseIdleAfter, IDLE_MAX_S),
    hibernateIdleAfterS: boundedInt('--hibernate-idle-after', flags.hibernateIdleAfter, IDLE_MAX_S),
    defaultPool: boundedInt('--default-pool', flags.defaultPool, POOL_MAX),
    poolBudget: poolBudgetFlags(flags),
    tuning: {
      ...(flags.tcgTbMib === undefined ? {} : { tbMiB: parseTbMiB(flags.tcgTbMib) }),
      ...(flags.mergeMemory === undefined ? {} : { merge: parseMerge(flags.mergeMemory) }),
    },
  };
}

/** Resolves when the process is told to stop. */
function stopRequested(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => resolve(sig));
  });
}

export function register(cmd: Command): void {
  cmd
    .option('--socket <path>', 'unix socket (default $FORKD_HOME/run/forkd.sock)')
    .option('--listen <host:port>', 'also serve on TCP (needs --token-file)')
    .option('--tls-cert <file>', 'TLS certificate (PEM) for --listen')
    .option('--tls-key <file>', 'TLS private key (PEM) for --listen')
    .option('--token-file <file>', 'bearer tokens, one ID:TOKEN per line (mode 0600)')
    .option('--audit-file <file>', 'also append audit entries here as JSON lines')
    .option('--e2b-listen <host:port>', 'serve the E2B SDK here (needs --token-file; docs/e2b.md)')
    .option(
      '--dns-upstream <addr[:port]>',
      "resolver the guests' DNS queries go to (default: FORKD_DNS_UPSTREAM, else the host's first nameserver)",
    )
    .option('--max-booting <n>', 'sandboxes booting at once before 503 (default 4)')
    .option('--max-execs <n>', 'commands running at once before 503 (default 256)')
    .option(
      '--branch-mode <mode>',
      'mode of branches that name none: auto (live where `forkd doctor` says available, else copy), copy or live',
      'auto',
    )
    .option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent', 'info')
    .option(
      '--default-memory <size>',
      "memory limit of a sandbox's QEMU that names none: auto (guest RAM + 256M), none, or a size",
    )
    .option(
      '--default-cpu <cores>',
      'CPU quota of a sandbox that names none: auto (its vCPUs, at most half the host), none, or cores',
    )
    .option('--default-pids <n>', "cap on a sandbox QEMU's threads: 512 by default, none, or n")
    .option(
      '--no-confine',
      "run QEMU unconfined (no seccomp filter, the daemon's user) for debugging; also FORKD_CONFINE=off",
    )
    .option(
      '--accept-unenforced',
      'start sandboxes this host cannot hold to what they ask (not root: no namespaces, nftables, cgroups or uid switch), each reporting what is unenforced, instead of refusing them; also FORKD_ACCEPT_UNENFORCED=1',
    )
    .option(
      '--pause-idle-after <s>',
      'pause a quiet sandbox after s seconds without a request (default 60; 0: never); the next request wakes it',
    )
    .option(
      '--hibernate-idle-after <s>',
      'hibernate a quiet sandbox (to disk, QEMU ended) after s seconds without a request (default 3600; 0: never); the next request restores it',
    )
    .option(
      '--default-pool <n>',
      'pre-warmed pool each `snapshot create` gets, so its forks start fast (default 2, or FORKD_DEFAULT_POOL; 0: none)',
    )
    .option(
      '--pool-budget-vms <n>',
      "pool VMs of all snapshots together at most; the least recently forked snapshots' pools give way first (default 8, or FORKD_POOL_BUDGET_VMS; 0: no pools)",
    )
    .option(
      '--pool-budget-mib <n>',
      'host memory of all pool VMs together at most, in MiB (default 384, or FORKD_POOL_BUDGET_MIB)',
    )
    .option(
      '--pod-snapshots <list>',
      'snapshots pods (containerd tasks) may fork: tags, tag patterns (agent-*) and registry prefixes (host/team/), comma-separated (default: FORKD_POD_SNAPSHOTS, else none; docs/kubernetes.md)',
    )
    .option(
      '--image-cache-ttl <seconds>',
      "remove a cache image (a container image's root the containerd shim made) once nothing has used it this long (default 86400, or FORKD_IMAGE_CACHE_TTL; docs/kubernetes.md)",
    )
    .option(
      '--tcg-tb-mib <n>',
      "cap each QEMU's TCG translation buffer at n MiB (default 64, or FORKD_TCG_TB_MIB; `default`: QEMU's 1 GiB)",
    )
    .option(
      '--merge-memory <mode>',
      'merge identical pages across sandboxes with KSM: off (default), on, same-layout (also no ASLR in QEMU); only for sandboxes that trust each other (docs/idle.md)',
    )
    .action(
      action(async (flags: DaemonFlags) => {
        const stop = stopRequested();
        const daemon = await startDaemon(toOptions(flags));
        await stop;
        await daemon.close();
        return 0;
      }),
    );
}
