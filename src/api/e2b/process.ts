/**
 * envd's process.Process over forkd's streaming exec: Start runs a command and streams its
 * output and exit; Connect attaches another client to a running one; List, SendInput,
 * CloseStdin and SendSignal reach it by pid. E2B names processes by guest pid, forkd by exec
 * id, so the listener keeps a table of the commands it started (pid → exec, and the clients
 * watching each); an entry goes when its command exits. As with E2B, a client that goes
 * away leaves its command running: Connect can pick it up again.
 */
import type { ExecRequestT } from '../../contract/schemas.js';
import type { ExecStream } from '../../services/contracts.js';
import type { Api } from '../types.js';
import { userOf, type E2bContext } from './app.js';
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

interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

/** A command the listener started, and who is watching it. */
interface Entry {
  sandbox: string;
  pid: number;
  execId: string;
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

/** Copies the exec's events to every watcher until it exits; then the entry goes. */
async function pump(table: ProcessTable, entry: Entry, exec: ExecStream): Promise<void> {
  try {
    for await (const ev of exec.events) {
      const message = toProcessEvent(ev);
      for (const w of entry.watchers) w.send(message);
    }
  } finally {
    table.remove(entry);
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

  serverStream(app, `${SERVICE}/Start`, KEEPALIVE, async (msg, out, request) => {
    const sandbox = ctx.sandboxOf(request);
    if (msg.pty !== undefined && msg.pty !== null) {
      throw new ConnectFailure(
        'unimplemented',
        "PTY sessions are not served to the E2B SDK: use forkd's terminal API (docs/e2b.md)",
      );
    }
    const config = parseConfig(msg);
    // Absent means true (old SDKs); new SDKs say false unless they want stdin.
    const stdin = msg.stdin !== false;
    const exec = await sandboxes.execStream(sandbox, execRequest(config, stdin, userOf(request)));
    const pid = await exec.pid;
    const entry: Entry = {
      sandbox,
      pid,
      execId: exec.execId,
      config,
      watchers: new Set([out]),
      done: Promise.resolve(),
    };
    const tag = stringField(msg, 'tag');
    if (tag) entry.tag = tag;
    table.add(entry);
    out.send({ event: { start: { pid } } });
    entry.done = pump(table, entry, exec);
    // Watchers see a failure; with none left it must not become an unhandled rejection.
    entry.done.catch(() => undefined);
    try {
      await Promise.race([entry.done, out.closed]);
    } finally {
      entry.watchers.delete(out);
    }
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
    const sandbox = ctx.sandboxOf(request);
    const entry = table.find(sandbox, msg.process);
    const input = objectField(msg.input, 'input');
    if (input.pty !== undefined) throw new ConnectFailure('unimplemented', 'no PTY input');
    const data = bytesField(input, 'stdin') ?? Buffer.alloc(0);
    await sandboxes.writeStdin(sandbox, entry.execId, data, false);
    return {};
  });

  unary(app, `${SERVICE}/CloseStdin`, async (msg, request) => {
    const sandbox = ctx.sandboxOf(request);
    const entry = table.find(sandbox, msg.process);
    await sandboxes.writeStdin(sandbox, entry.execId, Buffer.alloc(0), true);
    return {};
  });

  unary(app, `${SERVICE}/SendSignal`, async (msg, request) => {
    const sandbox = ctx.sandboxOf(request);
    const entry = table.find(sandbox, msg.process);
    const signal = msg.signal === 'SIGNAL_SIGTERM' || msg.signal === 15 ? 'SIGTERM' : 'SIGKILL';
    await sandboxes.killExec(sandbox, entry.execId, signal);
    return {};
  });

  for (const method of ['Update', 'StreamInput']) {
    app.post(`${SERVICE}/${method}`, { config: { plane: 'rpc' } }, async () => {
      throw new ConnectFailure('unimplemented', `process.Process/${method} is not served by forkd`);
    });
  }
}
