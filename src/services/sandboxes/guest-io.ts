/**
 * A sandbox's guest I/O behind one facade: commands (buffered and streaming, under the
 * daemon's cap on running commands), files, terminals and the guest user. Each call wakes a
 * paused sandbox first, counts as a request for the idle policy, and applies the
 * sandbox's default working directory and user as Docker applies an image's.
 */
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import type {
  ExecRequestT,
  ExecResultT,
  FileStatT,
  GuestUserT,
  PtyQueryT,
  PtySessionT,
} from '../../contract/schemas.js';
import type { ExecHandle } from '../../drivers/agent/client.js';
import { ForkdError } from '../../errors.js';
import type { ExecStream, PtyAttachment } from '../contracts.js';
import { getImage, imageExecDefaults, type ExecDefaults } from '../images/index.js';
import { readManifest } from '../snapshots/files.js';
import { runBuffered, startStreaming, withExecDefaults } from './exec.js';
import { openDownload, toWireStat } from './files.js';
import { Gate } from './gate.js';
import type { AwakeLive, Live } from './live.js';
import { guestUser, handOver, isRootSpec, missingDirs, ownersOf } from './owners.js';
import type { SandboxParts } from './parts.js';
import { listSessions, openOrAttach } from './pty.js';
import { busyWhile } from './tiers.js';

/** Retry-After hint: an exec slot frees quickly. */
const EXEC_RETRY_S = 1;

type WriteOptions = { mode?: number; parents?: boolean; user?: string };
/** `xattrs`: `user.*` extended attributes the written file gets (E2B's file metadata). */
type UploadOptions = WriteOptions & { xattrs?: Record<string, string> };

export class GuestIo {
  private readonly gate: Gate;

  constructor(
    private readonly p: SandboxParts,
    /** A running sandbox for a request, woken first when paused (idle.ts). */
    private readonly awake: (id: string) => Promise<AwakeLive>,
    maxExecs: number,
  ) {
    this.gate = new Gate('commands running', maxExecs, EXEC_RETRY_S);
  }

  /** Commands in flight against the cap, for /metrics. */
  get count(): number {
    return this.gate.count;
  }

  /** A slot under the cap (`capacity` past it), for guest work other services start (an eval). */
  slot(): () => void {
    return this.gate.enter();
  }

  async exec(id: string, req: ExecRequestT): Promise<ExecResultT> {
    const live = await this.awake(id);
    const full = withExecDefaults(req, await this.defaultsOf(id, live));
    return busyWhile(
      live,
      this.gate.around(() => runBuffered(live.agent, full)),
    );
  }

  async execStream(id: string, req: ExecRequestT): Promise<ExecStream> {
    const live = await this.awake(id);
    const full = withExecDefaults(req, await this.defaultsOf(id, live));
    const release = this.gate.enter();
    try {
      const { stream, handle } = await startStreaming(live.agent, full);
      live.execs.set(stream.execId, handle);
      void busyWhile(live, handle.result).catch(() => undefined);
      const done = () => {
        release();
        live.execs.delete(stream.execId);
      };
      handle.result.then(done, done);
      return stream;
    } catch (e) {
      release();
      throw e;
    }
  }

  async writeStdin(id: string, execId: string, data: Buffer, eof: boolean): Promise<void> {
    const handle = await this.execOf(id, execId);
    if (data.length > 0) await handle.writeStdin(data);
    if (eof) await handle.endStdin();
  }

  async killExec(id: string, execId: string, signal: string): Promise<void> {
    await (await this.execOf(id, execId)).kill(signal);
  }

  async readFile(id: string, path: string): Promise<Readable> {
    return openDownload((await this.awake(id)).agent, path);
  }

  async writeFile(id: string, path: string, body: Readable, opts: UploadOptions): Promise<number> {
    const live = await this.awake(id);
    const { user, xattrs, ...rest } = opts;
    if (xattrs) live.agent.requireXattrs();
    const owner = await this.ownerFor(id, live, user);
    const created =
      owner && rest.parents !== false ? await missingDirs(live.agent, posix.dirname(path)) : [];
    const size = await busyWhile(
      live,
      live.agent.writeFile(path, body as AsyncIterable<Buffer>, rest),
    );
    if (owner) await handOver(live.agent, owner, [...created, path]);
    if (xattrs && Object.keys(xattrs).length) await live.agent.setXattrs(path, xattrs);
    return size;
  }

  async statFile(id: string, path: string, opts: { owners?: boolean } = {}): Promise<FileStatT> {
    const agent = (await this.awake(id)).agent;
    const stat = toWireStat(await agent.stat(path));
    return opts.owners ? { ...stat, ...(await ownersOf(agent, [path]))[0] } : stat;
  }

  async listFiles(id: string, path: string, opts: { owners?: boolean } = {}): Promise<FileStatT[]> {
    const agent = (await this.awake(id)).agent;
    const entries = (await agent.list(path)).map(toWireStat);
    if (!opts.owners) return entries;
    const owners = await ownersOf(
      agent,
      entries.map((e) => posix.join(path, e.name)),
    );
    return entries.map((e, i) => ({ ...e, ...owners[i] }));
  }

  async makeDir(id: string, path: string, opts: WriteOptions): Promise<void> {
    const live = await this.awake(id);
    const { user, ...rest } = opts;
    const owner = await this.ownerFor(id, live, user);
    const created = owner && rest.parents ? await missingDirs(live.agent, path) : [];
    await live.agent.mkdir(path, rest);
    if (owner) await handOver(live.agent, owner, rest.parents ? created : [path]);
  }

  async removeFile(id: string, path: string, opts: { recursive?: boolean }): Promise<void> {
    await (await this.awake(id)).agent.remove(path, opts);
  }

  /**
   * Who a call that names `user` (or none: the sandbox's default user, else root) acts as
   * in the guest, with its home, and the directory its commands start in by default.
   */
  async guestUser(id: string, user?: string): Promise<GuestUserT> {
    const live = await this.awake(id);
    const defaults = await this.defaultsOf(id, live);
    const u = await guestUser(live.agent, user ?? defaults.user ?? 'root');
    return { name: u.name, uid: u.uid, gid: u.gid, home: u.home, cwd: defaults.cwd ?? u.home };
  }

  /** A terminal session: opened, or reattached by its session id (the agent holds it). */
  async pty(
    id: string,
    req: PtyQueryT,
    onData: (chunk: Buffer, offset: number) => void,
  ): Promise<PtyAttachment> {
    const live = await this.awake(id);
    // A reattach joins the session as it runs (and refuses cwd and user).
    const full = req.session ? req : withExecDefaults(req, await this.defaultsOf(id, live));
    const attachment = await openOrAttach(live.agent, full, onData);
    void busyWhile(live, attachment.ended).catch(() => undefined);
    return attachment;
  }

  async ptySessions(id: string): Promise<PtySessionT[]> {
    return listSessions((await this.awake(id)).agent);
  }

  /** The guest user new files and directories go to (none: root keeps them). */
  private async ownerFor(id: string, live: AwakeLive, user: string | undefined) {
    const spec = user ?? (await this.defaultsOf(id, live)).user;
    return spec && !isRootSpec(spec) ? guestUser(live.agent, spec) : undefined;
  }

  /**
   * The working directory and user of the sandbox's commands that name none, as Docker
   * applies an image's to `docker exec`: what its snapshot recorded (`snapshot create
   * --user/--workdir`, else the image's), for a sandbox booted from an image its image
   * config's WorkingDir and User. Read once per process: neither changes while it runs.
   */
  private defaultsOf(id: string, live: Live): Promise<ExecDefaults> {
    live.execDefaults ??= this.readDefaults(id);
    return live.execDefaults;
  }

  private async readDefaults(id: string): Promise<ExecDefaults> {
    const { image, snapshot } = this.p.table.row(id);
    const m = snapshot
      ? await readManifest(this.p.paths, snapshot).catch(() => undefined)
      : undefined;
    // A build's result records its WORKDIR and USER in its config (docs/build.md).
    const user = m?.user ?? (m?.config?.user?.split(':')[0] || undefined);
    const workdir = m?.workdir ?? m?.config?.working_dir;
    if (user || workdir) return { ...(workdir ? { cwd: workdir } : {}), ...(user ? { user } : {}) };
    if (!image) return {};
    return getImage(this.p.paths, image).then(imageExecDefaults, () => ({}));
  }

  private async execOf(id: string, execId: string): Promise<ExecHandle> {
    const handle = (await this.awake(id)).execs.get(execId);
    if (handle) return handle;
    throw new ForkdError(
      'exec_not_found',
      `no running command ${execId} in sandbox ${id}: it finished, or never existed`,
      { id, exec_id: execId },
    );
  }
}
