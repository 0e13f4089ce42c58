/**
 * A real `forkd daemon` process for tests: started with a test home, waited for until its
 * socket answers, stopped by pid (SIGTERM, or SIGKILL to simulate a crash), plus a tiny
 * JSON-over-HTTP client for its unix socket (kept apart from the SDK on purpose: these
 * tests check the daemon, not the client).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { request } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CLI } from '../../helpers/cli.js';
import type { TestHome } from '../../helpers/home.js';

export interface DaemonProcess {
  child: ChildProcess;
  socket: string;
  /** Everything it logged so far (JSON lines). */
  stderr(): string;
  /** Resolves with its exit code once it exits. */
  exited: Promise<number | null>;
}

export interface Reply {
  status: number;
  body: unknown;
  headers: Record<string, string | string[] | undefined>;
}

export function socketOf(home: TestHome): string {
  return join(home.dir, 'run', 'forkd.sock');
}

/** Start `forkd daemon ARGS` and wait until /healthz answers (or it exits). */
export async function startDaemonProcess(
  home: TestHome,
  args: string[] = [],
): Promise<DaemonProcess> {
  const child = spawn(process.execPath, [CLI, 'daemon', '--log-level', 'warn', ...args], {
    env: home.env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => resolve(code)),
  );
  const daemon = { child, socket: socketOf(home), stderr: () => err, exited };
  let gone = false;
  void exited.then(() => (gone = true));
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (gone) return daemon; // the caller checks why
    const up = await call(daemon.socket, 'GET', '/healthz').then(
      (r) => r.status === 200,
      () => false,
    );
    if (up) return daemon;
    if (Date.now() > deadline) throw new Error(`the daemon did not come up: ${err}`);
    await sleep(100);
  }
}

/** Stop it with `signal` and wait for the exit. */
export async function stopDaemonProcess(
  d: DaemonProcess,
  signal: NodeJS.Signals,
): Promise<number | null> {
  if (d.child.exitCode === null && d.child.signalCode === null) d.child.kill(signal);
  return d.exited;
}

/** One JSON request to the daemon's unix socket. */
export function call(socket: string, method: string, path: string, body?: unknown): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = request(
      {
        socketPath: socket,
        method,
        path,
        headers: payload
          ? { 'content-type': 'application/json', 'content-length': payload.length }
          : {},
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (d: Buffer) => parts.push(d));
        res.on('end', () => {
          const text = Buffer.concat(parts).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = text ? JSON.parse(text) : undefined;
          } catch {
            // not JSON: keep the text
          }
          resolve({ status: res.statusCode ?? 0, body: parsed, headers: res.headers });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}
