/**
 * envd's process.Process over forkd's streaming exec: Start runs a command and streams its
 * output and exit; Connect attaches another client to a running one; List, SendInput,
 * CloseStdin and SendSignal reach it by pid. E2B names processes by guest pid, forkd by exec
 * id, so the listener keeps a table of the commands it started (pid → exec, and the clients
 * watching each); an entry goes when its command exits. As with E2B, a client that goes
 * away leaves its command running: Connect can pick it up again. A Start with `pty` opens a
 * terminal session instead (pty.ts); it is in the same table, reached by the same pid.
 */
import type { FastifyRequest } from 'fastify';
import type { ExecRequestT } from '../../contract/schemas.js';
import type { ExecStream, PtyAttachment } from '../../services/contracts.js';
import type { Api } from '../types.js';
import { userOf, type E2bContext } from './app.js';
import { openPty, ptyDataEvent, ptyEndEvent, ptySize, type PtySize } from './pty.js';
import { serverStream, unary, type StreamOut } from './rpc.js';
import {
  bytesField,
  ConnectFailure,
  objectField,
  requiredString,
  stringField,
  stringMap,
  uintField,
} from './wire.js';

const SERVICE = '/process.Process';
const KEEPALIVE = { event: { keepalive: {} } };

type Msg = Record<string, unknown>;
/** How long a cut stream looks for its sandbox's end: 20 × 150 ms. */
const GONE_CHECKS = 20;
const GONE_CHECK_MS = 150;

interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

/** How input, signals and resizes reach a command: its exec, or its terminal session. */
interface Control {
  input(data: Buffer, pty: boolean): Promise<void>;
  closeStdin(): Promise<void>;
  signal(signal: 'SIGTERM' | 'SIGKILL'): Promise<void>;
  resize(size: PtySize): Promise<void>;
}

/** A command the listener started, and who is watching it. */
interface Entry {
  sandbox: string;
  pid: number;
  control: Control;
  tag?: string;
  config: ProcessConfig;
  watchers: Set<StreamOut>;
  /** Resolves when the command ended (or its stream failed); watchers end with it. */
  done: Promise<unknown>;
}

/** What the events of one exec look like to envd's clients. */
type ExecEvent = ExecStream['events'] extends AsyncIterable<infer E> ? E : never;
type ExitEvent = Extract<ExecEvent, { type: 'exit' }>;

export function toProcessEvent(event: ExecEvent): unknown {
  if (event.type !== 'exit') {
    return { event: { data: { [event.type]: event.data.toString('base64') } } };
  }
  const ev = event as ExitEvent;
  const signalled = ev.exit_code === null;
  const name = ev.signal?.replace(/^SIG/, '').toLowerCase() ?? 'killed';
  const end: Record<string, unknown> = {
    exitCode: signalled ? -1 : ev.exit_code,
    exited: !signalled,
    status: signalled ? `signal: ${name}` : `exit status ${ev.exit_code}`,
  };
  if (ev.timed_out) end.error = 'the command timed out';
  return { event: { end } };
}

function parseConfig(msg: Record<string, unknown>): ProcessConfig {
  const p = objectField(msg.process, 'process');
  const args = p.args ?? [];
  if (!Array.isArray(args) || !args.every((a) => typeof a === 'string')) {
    throw new ConnectFailure('invalid_argument', 'process.args must be strings');
  }
  const config: ProcessConfig = {
    cmd: requiredString(p, 'cmd'),
    args: args as string[],
    envs: stringMap(p, 'envs'),
  };
  const cwd = stringField(p, 'cwd');
  if (cwd) config.cwd = cwd;
  return config;
}

export function execRequest(
  config: ProcessConfig,
  stdin: boolean,
  user: string | undefined,
): ExecRequestT {
  const req: ExecRequestT = { argv: [config.cmd, ...config.args], stream: true };
  if (Object.keys(config.envs).length) req.env = config.envs;
  if (config.cwd) req.cwd = config.cwd;
  if (user) req.user = user;
  if (stdin) req.keep_stdin_open = true;
  return req;
}

/** The table of running commands, per listener. */
class ProcessTable {
  private readonly entries = new Map<string, Entry>();

  private key = (sandbox: string, pid: number) => `${sandbox}/${pid}`;

  add(entry: Entry): void {
    this.entries.set(this.key(entry.sandbox, entry.pid), entry);
  }

  remove(entry: Entry): void {
    this.entries.delete(this.key(entry.sandbox, entry.pid));
  }

  of(sandbox: string): Entry[] {
    return [...this.entries.values()].filter((e) => e.sandbox === sandbox);
  }

  /** The command a ProcessSelector (`{pid}` or `{tag}`) names. */
  find(sandbox: string, selector: unknown): Entry {
    const sel = objectField(selector, 'process');
    const pid = uintField(sel, 'pid');
    const tag = stringField(sel, 'tag');
    const entry =
      pid !== undefined
        ? this.entries.get(this.key(sandbox, pid))
        : this.of(sandbox).find((e) => tag !== undefined && e.tag === tag);
    if (!entry) {
      const what = pid !== undefined ? `pid ${pid}` : `tag ${String(tag).slice(0, 64)}`;
      throw new ConnectFailure('not_found', `process with ${what} not found`);
    }
    return entry;
  }
}

/** The control of an exec: stdin and signals by its exec id; no terminal. */
function execControl(services: E2bContext['services'], sandbox: string, execId: string): Control {
  const s = services.sandboxes;
  return {
    input: async (data, pty) => {
      if (pty) throw new ConnectFailure('invalid_argument', 'not a PTY: send stdin');
      await s.writeStdin(sandbox, execId, data, false);
    },
    closeStdin: () => s.writeStdin(sandbox, execId, Buffer.alloc(0), true),
    signal: (signal) => s.killExec(sandbox, execId, signal),
    resize: async () => {
      throw new ConnectFailure('invalid_argument', 'not a PTY: only a terminal has a size');
    },
  };
}

/** The control of a terminal session: input, resize; a signal hangs it up. */
function ptyControl(pty: PtyAttachment): Control {
  return {
    input: (data) => pty.input(data),
    closeStdin: async () => {
      throw new ConnectFailure('invalid_argument', 'a PTY has no stdin to close: send exit');
    },
    signal: () => pty.kill(),
    resize: (size) => pty.resize(size.cols, size.rows),
  };
}

/**
 * Copies the exec's events to every watcher until it exits. A stream cut because the
 * sandbox went away ends with E2B's words for that (`why` says whether it did).
 */
async function pump(
  entry: Entry,
  exec: ExecStream,
  why: () => Promise<string | undefined>,
): Promise<void> {
  try {
    for await (const ev of exec.events) {
      const message = toProcessEvent(ev);
      for (const w of entry.watchers) w.send(message);
    }
  } catch (e) {
    const gone = await why();
    throw gone === undefined ? e : new ConnectFailure('unavailable', gone);
  }
}

/** Holds a watcher's stream open until the command is done or the watcher left. */
async function watch(entry: Entry, out: StreamOut): Promise<void> {
  entry.watchers.add(out);
  try {
    await Promise.race([entry.done, out.closed]);
  } finally {
    entry.watchers.delete(out);
  }
}

export async function processRoutes(app: Api, { ctx }: { ctx: E2bContext }) {
  const table = new ProcessTable();
  const sandboxes = ctx.services.sandboxes;
  /**
   * E2B's message when a command's sandbox is gone (killed, timed out), else undefined. The
   * guest channel drops a moment before a kill marks the sandbox: look for a few seconds.
   */
  const goneWhy = async (sandbox: string): Promise<string | undefined> => {
    for (let i = 0; i < GONE_CHECKS; i++) {
      const s = await sandboxes.get(sandbox).catch(() => undefined);
      if (s?.state !== 'running' && s?.state !== 'starting') {
        return 'the sandbox was killed or reached its end of life while the command was running';
      }
      await new Promise((r) => setTimeout(r, GONE_CHECK_MS));
    }
    return undefined;
  };

  /** Runs a new command's stream: its start event, then its watchers until it ends. */
  async function follow(entry: Entry, out: StreamOut, run: () => Promise<unknown>) {
    table.add(entry);
    out.send({ event: { start: { pid: entry.pid } } });
    entry.done = run().finally(() => table.remove(entry));
    // Watchers see a failure; with none left it must not become an unhandled rejection.
    entry.done.catch(() => undefined);
    try {
      await Promise.race([entry.done, out.closed]);
    } finally {
      entry.watchers.delete(out);
    }
  }

  async function startExec(sandbox: string, msg: Msg, out: StreamOut, request: FastifyRequest) {
    const config = parseConfig(msg);
    // Absent means true (old SDKs); new SDKs say false unless they want stdin.
    const stdin = msg.stdin !== false;
    const exec = await sandboxes.execStream(sandbox, execRequest(config, stdin, userOf(request)));
    const entry: Entry = {
      sandbox,
      pid: await exec.pid,
      control: execControl(ctx.services, sandbox, exec.execId),
      config,
      watchers: new Set([out]),
      done: Promise.resolve(),
    };
    const tag = stringField(msg, 'tag');
    if (tag) entry.tag = tag;
    await follow(entry, out, () => pump(entry, exec, () => goneWhy(sandbox)));
  }

  async function startPty(sandbox: string, msg: Msg, out: StreamOut, request: FastifyRequest) {
    const config = parseConfig(msg);
    const size = ptySize(msg.pty) as PtySize;
    // Output that comes before the start event is held back: the SDK wants the pid first.
    let early: Buffer[] | undefined = [];
    const watchers = new Set([out]);
    const user = userOf(request);
    const pty = await openPty(
      ctx.services,
      sandbox,
      { ...config, ...(user !== undefined && { user }) },
      size,
      (chunk) => {
        if (early) early.push(chunk);
        else for (const w of watchers) w.send(ptyDataEvent(chunk));
      },
    );
    const entry: Entry = {
      sandbox,
      pid: pty.pid,
      control: ptyControl(pty),
      config,
      watchers,
      done: Promise.resolve(),
    };
    const ended = async () => {
      const end = await pty.ended;
      for (const w of entry.watchers) w.send(ptyEndEvent(end));
    };
    await follow(entry, out, () => {
      for (const chunk of early ?? []) out.send(ptyDataEvent(chunk));
      early = undefined;
      return ended();
    });
  }

  serverStream(app, `${SERVICE}/Start`, KEEPALIVE, async (msg, out, request) => {
    const sandbox = ctx.sandboxOf(request);
    if (msg.pty !== undefined && msg.pty !== null) await startPty(sandbox, msg, out, request);
    else await startExec(sandbox, msg, out, request);
  });

  serverStream(app, `${SERVICE}/Connect`, KEEPALIVE, async (msg, out, request) => {
    const entry = table.find(ctx.sandboxOf(request), msg.process);
    out.send({ event: { start: { pid: entry.pid } } });
    await watch(entry, out);
  });

  unary(app, `${SERVICE}/List`, async (_msg, request) => ({
    processes: table.of(ctx.sandboxOf(request)).map((e) => ({
      config: e.config,
      pid: e.pid,
      ...(e.tag !== undefined && { tag: e.tag }),
    })),
  }));

  unary(app, `${SERVICE}/SendInput`, async (msg, request) => {
    const entry = table.find(ctx.sandboxOf(request), msg.process);
    const input = objectField(msg.input, 'input');
    const pty = bytesField(input, 'pty');
    await entry.control.input(pty ?? bytesField(input, 'stdin') ?? Buffer.alloc(0), !!pty);
    return {};
  });

  unary(app, `${SERVICE}/CloseStdin`, async (msg, request) => {
    await table.find(ctx.sandboxOf(request), msg.process).control.closeStdin();
    return {};
  });

  unary(app, `${SERVICE}/SendSignal`, async (msg, request) => {
    const entry = table.find(ctx.sandboxOf(request), msg.process);
    const signal = msg.signal === 'SIGNAL_SIGTERM' || msg.signal === 15 ? 'SIGTERM' : 'SIGKILL';
    await entry.control.signal(signal);
    return {};
  });

  unary(app, `${SERVICE}/Update`, async (msg, request) => {
    const entry = table.find(ctx.sandboxOf(request), msg.process);
    const size = ptySize(msg.pty);
    if (size) await entry.control.resize(size);
    return {};
  });

  app.post(`${SERVICE}/StreamInput`, { config: { plane: 'rpc' } }, async () => {
    throw new ConnectFailure('unimplemented', 'process.Process/StreamInput is not served by forkd');
  });
}
