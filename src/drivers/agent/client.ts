/**
 * The host-side driver of the guest agent (agent/PROTOCOL.md): typed requests over one
 * virtio-serial socket. Services use this; it never sees HTTP or SDK types. Framing lives in
 * wire.ts, the socket and request routing in connection.ts.
 */
import { ForkdError } from '../../errors.js';
import { AgentConnection, dial, type CallOptions } from './connection.js';
import { unsupported } from './errors.js';
import { startExec, type ExecHandle, type ExecHandlers, type ExecRequest, type ExecResult } from './exec.js';
import {
  fileCall,
  readFile,
  readFileStream,
  toFileStat,
  writeFile,
  type FileStat,
} from './files.js';
import {
  attachPty,
  listPtys,
  openPty,
  type PtyAttachment,
  type PtyHandlers,
  type PtyOpenRequest,
  type PtySessionInfo,
} from './pty.js';

export type { CallOptions } from './connection.js';
export type { ExecHandle, ExecHandlers, ExecRequest, ExecResult } from './exec.js';
export type { FileStat } from './files.js';
export type {
  PtyAttachment,
  PtyEnd,
  PtyHandlers,
  PtyOpenRequest,
  PtySessionInfo,
  PtySize,
} from './pty.js';

export interface AgentInfo {
  protocol: number;
  agent: string;
  kernel: string;
  uptimeMs: number;
  hostname: string;
}

export interface ConnectOptions {
  /** For dialling and the handshake together; default 10 s. */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Where malformed agent output is reported; default process.emitWarning. */
  onWarning?(message: string): void;
}

export interface Configuration {
  timeMs?: number;
  /** At most 512 bytes, credited to the guest RNG. */
  entropy?: Buffer;
  hostname?: string;
  /** Merged into the env of later execs; null removes a key. */
  env?: Record<string, string | null>;
  /** Static guest network: eth0 address (CIDR), default gateway, resolver. */
  net?: { address: string; gateway: string; dns: string };
  /** A restored fork: hang up the terminal sessions it inherited (they belong to its source). */
  ptyHangup?: boolean;
}

const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
const MAX_ENTROPY = 512;

function emitWarning(message: string): void {
  process.emitWarning(message, { code: 'FORKD_AGENT_PROTOCOL' });
}

/**
 * A session with one guest agent.
 *
 * @example
 * const agent = await AgentClient.connect('/var/lib/forkd/sandboxes/sbx-1/agent.sock');
 * const { exitCode, stdout } = await agent.run({ argv: ['uname', '-a'] });
 * agent.close();
 */
export class AgentClient {
  private constructor(private readonly conn: AgentConnection) {}

  /**
   * Dials `socketPath` (retrying while it does not exist or nobody listens yet) and
   * performs the 0xFF + `sync` handshake. Rejects `agent_unreachable` when the deadline passes
   * or the agent speaks another protocol version.
   */
  static async connect(socketPath: string, opts: ConnectOptions = {}): Promise<AgentClient> {
    const timeoutMs = opts.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    const started = Date.now();
    const socket = await dial(socketPath, timeoutMs, opts.signal);
    const conn = new AgentConnection(socket, opts.onWarning ?? emitWarning);
    try {
      const left = Math.max(1, timeoutMs - (Date.now() - started));
      await conn.handshake({ timeoutMs: left, signal: opts.signal, resend: true });
    } catch (e) {
      conn.close();
      throw e;
    }
    return new AgentClient(conn);
  }

  /** The agent's version string from the handshake (e.g. "0.1.0"). */
  get agentVersion(): string {
    return this.conn.agentVersion;
  }

  /**
   * Starts a new session on the same socket (after a restore or a host-side timeout).
   * Requests in flight fail with `agent_unreachable`; their commands keep running unobserved.
   */
  resync(opts: CallOptions = {}): Promise<void> {
    return this.conn.handshake({ timeoutMs: DEFAULT_CONNECT_TIMEOUT_MS, ...opts });
  }

  async ping(opts: CallOptions = {}): Promise<void> {
    await this.conn.call({ type: 'ping' }, { ...opts, kind: 'control' }).done;
  }

  /**
   * The guest's dirty page cache written to its disks (before a snapshot is captured, so no
   * fork repeats the parent's writeback). False when the agent predates the request.
   */
  async flush(opts: CallOptions = {}): Promise<boolean> {
    if (!this.conn.agentTypes.has('flush')) return false;
    await this.conn.call({ type: 'flush' }, { ...opts, kind: 'control' }).done;
    return true;
  }

  async info(opts: CallOptions = {}): Promise<AgentInfo> {
    const r = await this.conn.call({ type: 'info' }, { ...opts, kind: 'control' }).done;
    const str = (v: unknown) => (typeof v === 'string' ? v : '');
    return {
      protocol: typeof r.protocol === 'number' ? r.protocol : 0,
      agent: str(r.agent),
      kernel: str(r.kernel),
      uptimeMs: typeof r.uptime_ms === 'number' ? r.uptime_ms : 0,
      hostname: str(r.hostname),
    };
  }

  /** Starts a command; output arrives through `handlers` while it runs. */
  exec(req: ExecRequest, handlers?: ExecHandlers): ExecHandle {
    return startExec(this.conn, req, handlers);
  }

  /** Runs a command to its end with its output buffered; a non-zero exit is no error. */
  async run(
    req: ExecRequest & { stdinData?: Buffer },
  ): Promise<ExecResult & { stdout: Buffer; stderr: Buffer }> {
    const { stdinData, ...execReq } = req;
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    const handle = this.exec(
      { ...execReq, stdin: execReq.stdin === true || stdinData !== undefined },
      { onStdout: (c) => stdout.push(c), onStderr: (c) => stderr.push(c) },
    );
    const feed = async () => {
      if (stdinData === undefined && req.stdin !== true) return;
      if (stdinData !== undefined) await handle.writeStdin(stdinData);
      await handle.endStdin();
    };
    const [, result] = await Promise.all([feed(), handle.result]);
    return { ...result, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) };
  }

  /** Starts a command on a new terminal in the guest (`unsupported` on an older agent). */
  openPty(req: PtyOpenRequest, handlers?: PtyHandlers): Promise<PtyAttachment> {
    return openPty(this.conn, req, handlers);
  }

  /** Attaches to a running (or finished, unreported) terminal session: replay from `since`. */
  attachPty(target: { pty: number; since?: number }, handlers?: PtyHandlers): Promise<PtyAttachment> {
    return attachPty(this.conn, target, handlers);
  }

  /** The terminal sessions the guest holds (`unsupported` on an older agent). */
  listPtys(): Promise<PtySessionInfo[]> {
    return listPtys(this.conn);
  }

  /** Writes a file atomically; returns its size. */
  writeFile(
    path: string,
    data: Buffer | AsyncIterable<Buffer>,
    opts?: { mode?: number; parents?: boolean } & CallOptions,
  ): Promise<number> {
    return writeFile(this.conn, path, data, opts);
  }

  readFile(path: string, opts?: CallOptions): Promise<Buffer> {
    return readFile(this.conn, path, opts);
  }

  readFileStream(path: string, opts?: CallOptions): AsyncIterable<Buffer> {
    return readFileStream(this.conn, path, opts);
  }

  /** lstat: a symlink is reported as itself. */
  async stat(path: string, opts?: CallOptions): Promise<FileStat> {
    return toFileStat(await fileCall(this.conn, 'stat', path, {}, opts));
  }

  /** Directory entries sorted by name (the agent stops at 10 000). */
  async list(path: string, opts?: CallOptions): Promise<FileStat[]> {
    const reply = await fileCall(this.conn, 'list', path, {}, opts);
    const entries = Array.isArray(reply.entries) ? (reply.entries as Record<string, unknown>[]) : [];
    return entries.map(toFileStat);
  }

  async mkdir(path: string, opts: { parents?: boolean; mode?: number } & CallOptions = {}): Promise<void> {
    const { parents, mode, ...callOpts } = opts;
    await fileCall(this.conn, 'mkdir', path, { parents, mode }, callOpts);
  }

  async remove(path: string, opts: { recursive?: boolean } & CallOptions = {}): Promise<void> {
    const { recursive, ...callOpts } = opts;
    await fileCall(this.conn, 'remove', path, { recursive }, callOpts);
  }

  /** Throws `unsupported` now when the agent has no xattr_set (before a write it would follow). */
  requireXattrs(): void {
    if (!this.conn.agentTypes.has('xattr_set')) throw unsupported('xattr_set', this.conn.agentVersion);
  }

  /**
   * Sets (a string) or removes (null) `user.*` extended attributes of `path`, never through
   * a symlink. An agent older than this call refuses it as `unsupported`.
   */
  async setXattrs(
    path: string,
    xattrs: Record<string, string | null>,
    opts: CallOptions = {},
  ): Promise<void> {
    await fileCall(this.conn, 'xattr_set', path, { xattrs }, opts);
  }

  /** Pushes fork identity: wall clock, RNG entropy, hostname, exec environment. */
  async configure(c: Configuration, opts: CallOptions = {}): Promise<void> {
    if (c.entropy && c.entropy.length > MAX_ENTROPY) {
      throw new ForkdError('bad_request', `entropy is at most ${MAX_ENTROPY} bytes per configure`);
    }
    const fields = {
      type: 'configure',
      time_ms: c.timeMs,
      entropy: c.entropy?.toString('base64'),
      hostname: c.hostname,
      env: c.env,
      net_address: c.net?.address,
      net_gateway: c.net?.gateway,
      net_dns: c.net?.dns,
      pty_hangup: c.ptyHangup,
    };
    await this.conn.call(fields, { ...opts, kind: 'control' }).done;
  }

  /** Called once when the connection ends; `err` is undefined after {@link close}. */
  onClose(cb: (err?: Error) => void): void {
    this.conn.onClose(cb);
  }

  /** Closes the socket; every pending request rejects with `agent_unreachable`. */
  close(): void {
    this.conn.close();
  }
}
