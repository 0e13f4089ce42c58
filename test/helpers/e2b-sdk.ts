/**
 * The real `e2b` npm package, unmodified, for the E2B listener's tests: `test/e2b/` is a
 * project of its own holding the current 2.x (`e2b`, creates with POST /v2/sandboxes) and
 * the oldest 2.x that honours E2B_SANDBOX_URL (`e2b-2.7`, POST /sandboxes). Installed on
 * first use with npm ci from its lock file; imported by path so the suite type-checks
 * without it.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

const PROJECT = fileURLToPath(new URL('../../../test/e2b/', import.meta.url));
const INSTALL_MS = 5 * 60_000;

/** The two versions the tests drive, by their package name in test/e2b. */
export const E2B_VERSIONS = ['e2b', 'e2b-2.7'] as const;
export type E2bPackage = (typeof E2B_VERSIONS)[number];

/** What the tests use of the SDK (its own types stay in its package). */
export interface E2bCommandResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}
export interface E2bEntry {
  name: string;
  path: string;
  type?: string;
  owner?: string;
  group?: string;
  symlinkTarget?: string;
  metadata?: Record<string, string>;
}
/** One sample of `getMetrics()`. */
export interface E2bMetric {
  timestamp: Date;
  cpuUsedPct: number;
  cpuCount: number;
  memUsed: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
}
export interface E2bSandbox {
  sandboxId: string;
  commands: {
    run(
      cmd: string,
      opts?: {
        envs?: Record<string, string>;
        onStdout?: (s: string) => void;
        onStderr?: (s: string) => void;
        background?: boolean;
        timeoutMs?: number;
        user?: string;
      },
    ): Promise<E2bCommandResult & { pid: number; wait(): Promise<E2bCommandResult> }>;
    kill(pid: number): Promise<boolean>;
    list(): Promise<{ pid: number; cmd: string }[]>;
  };
  files: {
    write(
      path: string,
      data: string,
      opts?: { user?: string; gzip?: boolean; metadata?: Record<string, string> },
    ): Promise<{ path: string; metadata?: Record<string, string> }>;
    writeFiles(
      files: { path: string; data: string }[],
      opts?: { metadata?: Record<string, string> },
    ): Promise<{ path: string; metadata?: Record<string, string> }[]>;
    read(path: string, opts?: { gzip?: boolean }): Promise<string>;
    list(path: string): Promise<E2bEntry[]>;
    getInfo(path: string, opts?: { user?: string }): Promise<E2bEntry>;
    rename(from: string, to: string): Promise<E2bEntry>;
    makeDir(path: string): Promise<boolean>;
    exists(path: string): Promise<boolean>;
    remove(path: string): Promise<void>;
  };
  isRunning(): Promise<boolean>;
  getMetrics(opts?: { start?: Date; end?: Date }): Promise<E2bMetric[]>;
  connect(opts?: { timeoutMs?: number }): Promise<E2bSandbox>;
  setTimeout(ms: number): Promise<void>;
  pty: {
    create(opts: {
      cols: number;
      rows: number;
      onData: (data: Uint8Array) => void;
      envs?: Record<string, string>;
    }): Promise<E2bPtyHandle>;
    connect(pid: number, opts: { onData: (data: Uint8Array) => void }): Promise<E2bPtyHandle>;
    sendInput(pid: number, data: Uint8Array): Promise<void>;
    resize(pid: number, size: { cols: number; rows: number }): Promise<void>;
    kill(pid: number): Promise<boolean>;
  };
  downloadUrl(
    path: string,
    opts?: { user?: string; useSignatureExpiration?: number },
  ): Promise<string>;
  uploadUrl(
    path: string,
    opts?: { user?: string; useSignatureExpiration?: number },
  ): Promise<string>;
  getInfo(): Promise<{
    sandboxId: string;
    metadata: Record<string, string>;
    endAt: Date;
    startedAt: Date;
    state: string;
    lifecycle?: { onTimeout: string; autoResume: boolean };
  }>;
  kill(): Promise<boolean>;
  pause?(opts?: { keepMemory?: boolean }): Promise<boolean>;
  fork?(opts?: { count?: number; timeoutMs?: number }): Promise<(E2bSandbox | Error)[]>;
  betaPause?(): Promise<boolean>;
}
/** A PTY session's handle (the SDK's CommandHandle). */
export interface E2bPtyHandle {
  pid: number;
  exitCode?: number;
  wait(): Promise<unknown>;
  disconnect(): Promise<void>;
}
/** The `Template()` builder (what the template test uses of it). */
export interface E2bTemplateBuilder {
  fromTemplate(name: string): E2bTemplateBuilder;
  fromImage(ref: string, credentials?: { username: string; password: string }): E2bTemplateBuilder;
  copy(src: string, dest: string, opts?: { user?: string; mode?: number }): E2bTemplateBuilder;
  runCmd(cmd: string | string[], opts?: { user?: string }): E2bTemplateBuilder;
  setEnvs(envs: Record<string, string>): E2bTemplateBuilder;
  setWorkdir(dir: string): E2bTemplateBuilder;
  setUser(user: string): E2bTemplateBuilder;
  setStartCmd(cmd: string, ready: unknown): E2bTemplateBuilder;
  skipCache(): E2bTemplateBuilder;
}
export interface E2bBuildOptions {
  alias?: string;
  cpuCount?: number;
  memoryMB?: number;
  onBuildLogs?: (entry: { level: string; message: string }) => void;
}
export interface E2bModule {
  Template: ((opts?: { fileContextPath?: string }) => E2bTemplateBuilder) & {
    build(
      t: E2bTemplateBuilder,
      nameOrOpts: string | E2bBuildOptions,
      opts?: E2bBuildOptions,
    ): Promise<{ templateId: string; buildId: string }>;
    exists(name: string): Promise<boolean>;
  };
  waitForPort(port: number): unknown;
  waitForFile(path: string): unknown;
  BuildError: new (...a: never[]) => Error;
  Sandbox: {
    create(template: string, opts?: Record<string, unknown>): Promise<E2bSandbox>;
    connect(id: string, opts?: Record<string, unknown>): Promise<E2bSandbox>;
    kill(id: string): Promise<boolean>;
    fork(
      id: string,
      opts?: { count?: number; timeoutMs?: number },
    ): Promise<(E2bSandbox | Error)[]>;
    list(opts?: Record<string, unknown>): {
      nextItems(): Promise<{ sandboxId: string }[]>;
      hasNext: boolean;
    };
  };
  CommandExitError: new (...a: never[]) => Error & E2bCommandResult;
  NotFoundError: new (...a: never[]) => Error;
  TimeoutError: new (...a: never[]) => Error;
}

const run = promisify(execFile);

/** Install test/e2b's packages if they are not there yet. */
async function ensureInstalled(): Promise<void> {
  if (E2B_VERSIONS.every((p) => existsSync(join(PROJECT, 'node_modules', p, 'package.json')))) {
    return;
  }
  await run('npm', ['ci', '--prefer-offline', '--no-audit', '--no-fund'], {
    cwd: PROJECT,
    timeout: INSTALL_MS,
  });
}

export async function loadE2b(pkg: E2bPackage): Promise<E2bModule> {
  await ensureInstalled();
  const entry = join(PROJECT, 'node_modules', pkg, 'dist', 'index.mjs');
  return (await import(pathToFileURL(entry).href)) as E2bModule;
}
