/**
 * The daemon process: claim the run dir, open the store, reconcile sandboxes with the host
 * (re-adopting the ones whose QEMU survived the previous daemon), build the services, and
 * serve them through the API on the unix socket (and TCP/TLS if asked). `close()` stops
 * accepting, drains requests and closes the store, but leaves every sandbox running: the
 * next daemon adopts them.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../api/app.js';
import { buildE2bApp } from '../api/e2b/app.js';
import { paths as pathsOf } from '../config.js';
import { ForkdError } from '../errors.js';
import type { Services } from '../services/contracts.js';
import { buildServices, type ServiceSet } from '../services/index.js';
import { parseLimitDefaults, type LimitDefaultFlags } from '../services/limits.js';
import type { ReconcileReport } from '../services/sandboxes/reconcile.js';
import { DEFAULT_IDLE } from '../services/sandboxes/tiers.js';
import type { BranchModeT } from '../contract/schemas.js';
import type { VmTuning } from '../services/vmm-driver.js';
import { dnsUpstreamSetting } from '../drivers/net/dns.js';
import { Store } from '../store/db.js';
import { installMcp } from '../mcp/http.js';
import { createLogger, fastifyLoggerOptions, type LogLevel } from './log.js';
import { claimRunDir, runDirOf } from './rundir.js';
import { Listeners, parseListen, type TcpOptions } from './servers.js';
import { loadTokens } from './tokens.js';
import { poolBudgetFromEnv, type PoolBudgetLimits } from '../services/snapshots/pool-budget.js';

export interface DaemonOptions {
  /** FORKD_HOME; default the environment's. */
  home?: string;
  /** Unix socket path; default `$FORKD_HOME/run/forkd.sock`. */
  socket?: string;
  /** `HOST:PORT` to also serve on TCP (needs a token file). */
  listen?: string;
  tlsCert?: string;
  tlsKey?: string;
  tokenFile?: string;
  /** `HOST:PORT` for the E2B-compatible listener (needs a token file; docs/e2b.md). */
  e2bListen?: string;
  /** Also write audit entries as JSON lines here. */
  auditFile?: string;
  maxBooting?: number;
  maxExecs?: number;
  /** Mode of branches that name none (default `auto`: live where the host can). */
  branchMode?: BranchModeT | 'auto';
  /** Confine QEMU (default: on, unless FORKD_CONFINE=off; docs/security.md). */
  confine?: boolean;
  /**
   * Start sandboxes this host cannot hold to what they ask (not root, no nftables or
   * cgroups), each reporting what is unenforced, instead of refusing them.
   */
  acceptUnenforced?: boolean;
  /** Default resource limits as typed (`auto`, `none` or a value; docs/limits.md). */
  limitDefaults?: LimitDefaultFlags;
  /** How long close() waits for in-flight requests (default 10 s). */
  drainMs?: number;
  /** Pause sandboxes idle this many seconds (default 60, 0: never; docs/idle.md). */
  pauseIdleAfterS?: number;
  /** Hibernate sandboxes idle this many seconds (default 3600, 0: never; docs/idle.md). */
  hibernateIdleAfterS?: number;
  /** TCG buffer cap and page merging (`--tcg-tb-mib`, `--merge-memory`; docs/idle.md). */
  tuning?: Partial<VmTuning>;
  /** Pre-warmed pool of each created snapshot (default 2, FORKD_DEFAULT_POOL; docs/snapshots.md). */
  defaultPool?: number;
  /** Pool VMs of all snapshots at most, count and memory (docs/snapshots.md "The pool budget"). */
  poolBudget?: Partial<PoolBudgetLimits>;
  /**
   * Where the DNS proxy forwards guests' queries, `ADDR[:PORT]` as typed (default:
   * FORKD_DNS_UPSTREAM, else the host's first nameserver; docs/network.md).
   */
  dnsUpstream?: string;
  /**
   * Snapshots pods may fork (`--pod-snapshots`, comma-separated; default FORKD_POD_SNAPSHOTS,
   * else none; docs/kubernetes.md).
   */
  podSnapshots?: string;
  /**
   * Seconds a cache image may stay unused (`--image-cache-ttl`; default
   * FORKD_IMAGE_CACHE_TTL, else a day; docs/kubernetes.md).
   */
  imageCacheTtlS?: number;
  logLevel?: LogLevel;
  logger?: Logger;
}

/** A running daemon. */
export interface DaemonHandle {
  socket: string;
  /** The TCP address when `listen` was given (port 0 picks a free one). */
  tcp?: { host: string; port: number };
  services: Services;
  /** The E2B-compatible listener's address when `e2bListen` was given. */
  e2b?: { host: string; port: number };
  /** What start-up reconciliation found. */
  recovered: ReconcileReport;
  /** Stop serving; sandboxes keep running. Idempotent. */
  close(): Promise<void>;
}

/** A count of seconds from the environment variable `name`; undefined when unset. */
function envSeconds(name: string): number | undefined {
  const text = process.env[name];
  if (!text) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) {
    throw new ForkdError(
      'bad_request',
      `${name} must be a positive number of seconds, not "${text}"`,
    );
  }
  return n;
}

export function defaultSocket(home: string): string {
  return join(runDirOf(home), 'forkd.sock');
}

/** Read TLS files and tokens, and refuse a TCP listener without a token. */
async function loadTransport(opts: DaemonOptions) {
  const tokens = opts.tokenFile ? await loadTokens(opts.tokenFile) : undefined;
  if (Boolean(opts.tlsCert) !== Boolean(opts.tlsKey)) {
    throw new ForkdError('bad_request', '--tls-cert and --tls-key go together');
  }
  if (opts.tlsCert && !opts.listen) {
    throw new ForkdError('bad_request', 'TLS is for TCP: add --listen HOST:PORT');
  }
  let tcp: TcpOptions | undefined;
  if (opts.listen) {
    if (!tokens) {
      throw new ForkdError(
        'bad_request',
        'refusing to listen on TCP without a token: pass --token-file (see docs/daemon.md)',
      );
    }
    const tls =
      opts.tlsCert && opts.tlsKey
        ? { cert: await readFile(opts.tlsCert), key: await readFile(opts.tlsKey) }
        : undefined;
    tcp = { ...parseListen(opts.listen), tls };
  }
  if (opts.e2bListen && !tokens) {
    throw new ForkdError(
      'bad_request',
      'refusing to serve E2B on TCP without a token: pass --token-file (its tokens are the E2B API keys)',
    );
  }
  const e2b = opts.e2bListen ? parseListen(opts.e2bListen) : undefined;
  return { tokens, tcp, e2b };
}

/** The E2B-compatible listener, listening (docs/e2b.md). */
async function listenE2b(
  services: Services,
  home: string,
  at: { host: string; port: number },
  tokens: Map<string, string> | undefined,
  logLevel: LogLevel | undefined,
): Promise<{ app: FastifyInstance; address: { host: string; port: number } }> {
  const app = await buildE2bApp(services, {
    tokens,
    logger: fastifyLoggerOptions(logLevel),
    templateFiles: join(home, 'e2b-template-files'),
  });
  await app.listen({ host: at.host, port: at.port });
  const addr = app.server.address();
  const address = typeof addr === 'object' && addr ? { host: addr.address, port: addr.port } : at;
  return { app, address };
}

export async function startDaemon(opts: DaemonOptions = {}): Promise<DaemonHandle> {
  const p = pathsOf(opts.home);
  const log = opts.logger ?? createLogger(opts.logLevel);
  const { tokens, tcp, e2b } = await loadTransport(opts);
  // Bad flags are refused before anything is claimed or started.
  const limitDefaults = parseLimitDefaults(opts.limitDefaults ?? {});
  const upstream = dnsUpstreamSetting(opts.dnsUpstream);
  const run = await claimRunDir(p.home, opts.socket ?? defaultSocket(p.home));
  let store: Store | undefined;
  let built: ServiceSet | undefined;
  let e2bApp: FastifyInstance | undefined;
  try {
    store = Store.open(p.db, { auditFile: opts.auditFile });
    built = buildServices({
      paths: p,
      store,
      log,
      maxBooting: opts.maxBooting,
      maxExecs: opts.maxExecs,
      branchMode: opts.branchMode,
      limitDefaults,
      confine: opts.confine,
      acceptUnenforced: opts.acceptUnenforced,
      pauseIdleAfterS: opts.pauseIdleAfterS ?? DEFAULT_IDLE.pauseAfterS,
      hibernateIdleAfterS: opts.hibernateIdleAfterS ?? DEFAULT_IDLE.hibernateAfterS,
      tuning: opts.tuning,
      defaultPool: opts.defaultPool,
      poolBudget: { ...poolBudgetFromEnv(), ...opts.poolBudget },
      podSnapshots: opts.podSnapshots ?? process.env.FORKD_POD_SNAPSHOTS,
      imageCacheTtlS: opts.imageCacheTtlS ?? envSeconds('FORKD_IMAGE_CACHE_TTL'),
      ...(upstream ? { network: { upstream } } : {}),
    });
    const services = built;
    const recovered = await services.start();
    const listeners = new Listeners();
    const app = await buildApp(services.services, {
      tokens,
      requireAuth: tcp !== undefined,
      logger: fastifyLoggerOptions(opts.logLevel),
      serverFactory: listeners.serverFactory,
    });
    await installMcp(app, { daemonUrl: `unix:${run.socket}` });
    const tcpAddress = await listeners.listen(app, run.socket, tcp);
    const e2bListener =
      e2b && (await listenE2b(services.services, p.home, e2b, tokens, opts.logLevel));
    e2bApp = e2bListener?.app;
    log.info(
      { socket: run.socket, tcp: tcpAddress, tls: Boolean(tcp?.tls), e2b: e2bListener?.address },
      'forkd daemon ready',
    );
    let closing: Promise<void> | undefined;
    const close = async () => {
      log.info('shutting down: draining requests, leaving sandboxes running');
      await listeners.close(app, opts.drainMs ?? 10_000);
      await e2bApp?.close();
      await services.detach();
      store?.close();
      await run.release();
      log.info('forkd daemon stopped');
    };
    return {
      socket: run.socket,
      tcp: tcpAddress,
      e2b: e2bListener?.address,
      services: services.services,
      recovered,
      close: () => (closing ??= close()),
    };
  } catch (e) {
    await e2bApp?.close();
    await built?.detach();
    store?.close();
    await run.release();
    throw e;
  }
}
