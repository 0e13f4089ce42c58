/**
 * The daemon a CLI test file runs `forkd` against: the API app over the fake services on a
 * unix socket in the file's own temporary directory (also its FORKD_HOME), listening before
 * the file's tests and closed, with the directory removed, after them.
 */
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { forkd as runCli, type CliResult } from './cli.js';
import { FakeServices } from './fake-services.js';

export interface FakeCli {
  fake: FakeServices;
  /** The environment that points the CLI at the app (FORKD_URL, FORKD_HOME). */
  env: NodeJS.ProcessEnv;
  /** Run `forkd ARGS…` against the app. */
  forkd(...args: string[]): Promise<CliResult>;
  /** Run `forkd ARGS… --json`, require exit 0, parse stdout. */
  json<T>(...args: string[]): Promise<T>;
}

/** The app over fresh fake services for this test file; `prefix` names its temp dir. */
export function cliOverFakes(prefix: string): FakeCli {
  const fake = new FakeServices();
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const socket = join(dir, 'forkd.sock');
  const env = { ...process.env, FORKD_URL: `unix:${socket}`, FORKD_HOME: dir };
  let app: FastifyInstance;
  before(async () => {
    app = await buildApp(fake.services, { requireAuth: false });
    await app.listen({ path: socket });
  });
  after(async () => {
    await app.close();
    await rm(dir, { recursive: true, force: true });
  });
  const forkd = (...args: string[]) => runCli(args, { env });
  return {
    fake,
    env,
    forkd,
    async json<T>(...args: string[]): Promise<T> {
      const r = await forkd(...args, '--json');
      assert.equal(r.code, 0, `forkd ${args.join(' ')}: ${r.stderr}`);
      return JSON.parse(out(r)) as T;
    },
  };
}

/** A run's stdout as text. */
export const out = (r: CliResult) => r.stdout.toString();
