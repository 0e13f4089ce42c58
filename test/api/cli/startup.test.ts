/**
 * A client verb loads only what it uses: `forkd ps`, `exec`, `cp`, `--version` and
 * `--help` never load the daemon, the services, the drivers, the store, Fastify, pino,
 * TypeBox or SQLite (that was most of a CLI call's 0.6–0.9 s). Watched with a module
 * resolve hook that logs every URL the process loads, against the fake daemon.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { CLI } from '../../helpers/cli.js';
import { cliOverFakes } from '../../helpers/fake-cli.js';
import { SEED } from '../../helpers/fake-services.js';

const { env } = cliOverFakes('forkd-cli-startup-');
const dir = mkdtempSync(join(tmpdir(), 'forkd-startup-'));
after(() => rm(dir, { recursive: true, force: true }));

const HOST_CODE =
  /node_modules\/(fastify|@fastify|better-sqlite3|pino|typebox|prom-client)\/|dist\/src\/(daemon|api|services|store|drivers)\//;

const HOOKS = `let log;
import { appendFileSync } from 'node:fs';
export function initialize(data) { log = data.log; }
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  appendFileSync(log, r.url + '\\n');
  return r;
}
`;

/** The URLs `forkd ARGS…` loads (async: the fake daemon answers from this process). */
async function loads(args: string[]): Promise<string[]> {
  const log = join(dir, `${args.join('_').replace(/\W/g, '')}.log`);
  await writeFile(join(dir, 'hooks.mjs'), HOOKS);
  const register =
    `import { register } from 'node:module';` +
    `register(${JSON.stringify(pathToFileURL(join(dir, 'hooks.mjs')).href)}, { data: { log: ${JSON.stringify(log)} } });`;
  await writeFile(log, '');
  const code = await new Promise<number | null>((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', `data:text/javascript,${encodeURIComponent(register)}`, CLI, ...args],
      { env, stdio: 'ignore' },
    );
    child.on('error', reject);
    child.on('close', resolve);
  });
  assert.equal(code, 0, `forkd ${args.join(' ')}`);
  return (await readFile(log, 'utf8')).split('\n').filter(Boolean);
}

for (const args of [
  ['--version'],
  ['--help'],
  ['ps'],
  ['exec', SEED.sandbox, '--', 'true'],
  ['cp', `${SEED.sandbox}:${SEED.file}`, '-'],
]) {
  test(`forkd ${args.join(' ')} loads no host code`, async () => {
    const urls = await loads(args);
    assert.ok(
      urls.some((u) => u.endsWith('/dist/src/cli/main.js')),
      'the hook saw the CLI',
    );
    assert.deepEqual(
      urls.filter((u) => HOST_CODE.test(u)),
      [],
    );
  });
}
