/**
 * The real guest agent for protocol tests: `forkd-agent --listen SOCKET` in its own temp
 * dir, killed by pid (with any process groups a test started) and its dir removed on stop.
 * Also a raw socket speaking the wire format directly, for what the client would never send.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { before, after } from 'node:test';
import { AgentClient } from '../../src/drivers/agent/client.js';
import { dial } from '../../src/drivers/agent/connection.js';
import {
  LineReader,
  encodeSync,
  parseLine,
  type AgentMessage,
} from '../../src/drivers/agent/wire.js';

/** dist/test/helpers → repository root. */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
/** FORKD_AGENT_BIN runs the suite against another build (the debug one, say). */
export const AGENT_BIN =
  process.env.FORKD_AGENT_BIN ?? join(REPO_ROOT, 'agent', 'build', 'forkd-agent');

export interface AgentProcess {
  /** A private temp dir; tests put their guest files under it. */
  dir: string;
  socketPath: string;
  pid: number;
  /** Process groups (exec pids; the agent setsid's them) to kill on stop. */
  track(pid: number): void;
  alive(): boolean;
  /** The agent's own stdout/stderr, for failure messages. */
  output(): string;
  stop(): Promise<void>;
}

const OUTPUT_KEEP = 64 * 1024;

/** Spawns the agent and waits until its socket exists. */
export async function startAgent(): Promise<AgentProcess> {
  if (!existsSync(AGENT_BIN)) {
    throw new Error(`${AGENT_BIN} does not exist: build the agent with \`make -C agent\``);
  }
  const dir = await mkdtemp(join(tmpdir(), 'forkd-agent-test-'));
  const socketPath = join(dir, 'agent.sock');
  const child = spawn(AGENT_BIN, ['--listen', socketPath], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (chunk: Buffer) => (output = (output + chunk.toString('utf8')).slice(-OUTPUT_KEEP));
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const groups = new Set<number>();
  const proc: AgentProcess = {
    dir,
    socketPath,
    pid: child.pid ?? -1,
    track: (pid) => groups.add(pid),
    alive: () => child.exitCode === null && child.signalCode === null,
    output: () => output,
    stop: () => stopAgent(child, groups, dir),
  };
  try {
    await waitForSocket(child, socketPath, () => output);
  } catch (e) {
    await proc.stop();
    throw e;
  }
  return proc;
}

/**
 * One agent and a client connected to it for a whole test file: started before its tests,
 * closed and stopped after them (also when they fail).
 */
export function agentForFile(): { agent(): AgentProcess; client(): AgentClient } {
  let agent: AgentProcess | undefined;
  let client: AgentClient | undefined;
  before(async () => {
    agent = await startAgent();
    client = await AgentClient.connect(agent.socketPath);
  });
  after(async () => {
    client?.close();
    await agent?.stop();
  });
  return { agent: () => agent!, client: () => client! };
}

async function waitForSocket(child: ChildProcess, path: string, output: () => string) {
  const deadline = Date.now() + 10_000;
  while (!existsSync(path)) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`forkd-agent exited (${child.exitCode ?? child.signalCode}): ${output()}`);
    }
    if (Date.now() > deadline) throw new Error(`forkd-agent did not create ${path} in 10 s`);
    await sleep(20);
  }
}

async function stopAgent(child: ChildProcess, groups: Set<number>, dir: string): Promise<void> {
  for (const pid of groups) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    process.kill(child.pid, 'SIGKILL');
    await exited;
  }
  await rm(dir, { recursive: true, force: true });
}

/** A socket that speaks the wire format by hand: exact bytes out, parsed messages in. */
export class RawAgentSocket {
  private readonly queue: { msg?: AgentMessage; bad?: string; afterSync: boolean }[] = [];
  private wake: (() => void) | undefined;
  private closed = false;

  private constructor(readonly socket: Socket) {
    const reader = new LineReader((line, afterSync) => {
      try {
        const msg = parseLine(line);
        if (msg) this.queue.push({ msg, afterSync });
      } catch (e) {
        this.queue.push({ bad: `${String(e)}: ${line.toString('utf8').slice(0, 200)}`, afterSync });
      }
      this.wake?.();
    });
    socket.on('data', (chunk: Buffer) => reader.push(chunk));
    socket.on('error', () => {});
    socket.on('close', () => {
      this.closed = true;
      this.wake?.();
    });
  }

  /** Dials like the client does (the socket file exists a moment before it listens). */
  static async connect(path: string): Promise<RawAgentSocket> {
    return new RawAgentSocket(await dial(path, 10_000));
  }

  /** Writes bytes as they are (a string gets no newline added). */
  write(data: string | Buffer): Promise<void> {
    return new Promise((resolve, reject) =>
      this.socket.write(data, (err) => (err ? reject(err) : resolve())),
    );
  }

  /** Writes one message as a JSON line. */
  send(msg: Record<string, unknown>): Promise<void> {
    return this.write(JSON.stringify(msg) + '\n');
  }

  /** 0xFF + sync, then drops everything until the reply with this nonce; returns the reply. */
  async sync(nonce: number = Math.floor(Math.random() * 2 ** 53)): Promise<AgentMessage> {
    await this.write(encodeSync(nonce));
    for (;;) {
      const item = await this.take(10_000);
      const msg = item.msg;
      if (item.afterSync && msg?.type === 'sync' && msg.nonce === nonce) return msg;
    }
  }

  /** The next message; fails on a malformed line or when none comes in time. */
  async next(timeoutMs = 10_000): Promise<AgentMessage> {
    const item = await this.take(timeoutMs);
    if (!item.msg) throw new Error(`malformed line from the agent: ${item.bad}`);
    return item.msg;
  }

  /** Collects messages until `stop` matches one (included). */
  async until(stop: (msg: AgentMessage) => boolean, timeoutMs = 10_000): Promise<AgentMessage[]> {
    const seen: AgentMessage[] = [];
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const msg = await this.next(Math.max(1, deadline - Date.now()));
      seen.push(msg);
      if (stop(msg)) return seen;
    }
  }

  /** Everything that arrives within `ms`. */
  async drain(ms: number): Promise<AgentMessage[]> {
    await sleep(ms);
    const items = this.queue.splice(0);
    return items.flatMap((i) => (i.msg ? [i.msg] : []));
  }

  close(): void {
    this.socket.destroy();
  }

  private async take(timeoutMs: number) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const item = this.queue.shift();
      if (item) return item;
      if (this.closed) throw new Error('the agent closed the connection');
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no message from the agent within ${timeoutMs} ms`);
      const timer = new AbortController();
      await Promise.race([
        sleep(left, undefined, { signal: timer.signal }).catch(() => {}),
        new Promise<void>((resolve) => (this.wake = resolve)),
      ]);
      timer.abort();
      this.wake = undefined;
    }
  }
}
