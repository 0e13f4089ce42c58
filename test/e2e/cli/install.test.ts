/**
 * The packages install as the README says: `npm pack` of the repository, then
 * `npm install -g --prefix TMP` of that tarball, puts `forkd` on that prefix's PATH, and it
 * works from any other directory — its bundled SDK, host code and the built agent and
 * capture helper all resolve from the installed location. The SDK's own tarball installs
 * into a project and imports, with its types and README. Install scripts are skipped
 * (`--ignore-scripts`): npm would compile SQLite's native module for minutes here, which
 * no client verb loads and which says nothing about our packaging.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { VERSION } from '@forkd/sdk';

const exec = promisify(execFile);
const REPO = process.cwd();
const scratch = await mkdtemp(join(tmpdir(), 'forkd-install-'));
after(() => rm(scratch, { recursive: true, force: true }));

/** npm as a user runs it, without our test environment's FORKD_* variables. */
function npm(args: string[], cwd: string) {
  return exec('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd,
    env: cleanEnv(),
    maxBuffer: 16 * 1024 * 1024,
  });
}

function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('FORKD_')) delete env[k];
  return env;
}

/** `npm pack` of `dir` into the scratch dir; the tarball's path. */
async function pack(dir: string): Promise<string> {
  const out = join(scratch, 'packs');
  await mkdir(out, { recursive: true });
  const { stdout } = await npm(['pack', '--pack-destination', out], dir);
  return join(out, stdout.trim().split('\n').at(-1) ?? '');
}

test('npm install -g of the packed repository: forkd runs from any directory', async () => {
  const tarball = await pack(REPO);
  const prefix = join(scratch, 'prefix');
  await npm(
    ['install', '-g', '--prefix', prefix, '--ignore-scripts', '--prefer-offline', tarball],
    scratch,
  );
  const forkd = join(prefix, 'bin', 'forkd');
  const elsewhere = await mkdtemp(join(scratch, 'elsewhere-'));
  const run = (args: string[]) => exec(forkd, args, { cwd: elsewhere, env: cleanEnv() });
  assert.equal((await run(['version'])).stdout, `forkd ${VERSION} (node ${process.version})\n`);
  assert.equal((await run(['--version'])).stdout.trim(), VERSION);
  assert.match((await run(['--help'])).stdout, /exec\s+run a command in a running sandbox/);
  // The containerd shim is installed beside it (docs/kubernetes.md); run without
  // containerd's flags, it says what it needs and resolves its imports from there.
  const shim = join(prefix, 'bin', 'containerd-shim-forkd-v2');
  await assert.rejects(
    exec(shim, [], { cwd: elsewhere, env: cleanEnv() }),
    (e: { code: number; stderr: string }) =>
      e.code === 1 && /-namespace and -id are required/.test(e.stderr),
  );
  // The daemon's whole module graph resolves from the install (Fastify, the store, drivers).
  assert.match((await run(['daemon', '--help'])).stdout, /--socket <path>/);
  const installed = join(prefix, 'lib', 'node_modules', 'forkd');
  for (const f of [
    'agent/build/forkd-agent',
    'native/build/forkd-capture',
    'node_modules/@forkd/sdk/dist/index.js',
  ]) {
    assert.ok(existsSync(join(installed, f)), `${f} is installed`);
  }
  assert.deepEqual(await readdir(elsewhere), [], 'nothing written where it ran');
});

test('the SDK tarball installs into a project and imports, with types and README', async () => {
  const tarball = await pack(resolve(REPO, 'packages', 'sdk'));
  const project = join(scratch, 'project');
  await mkdir(project);
  await writeFile(
    join(project, 'package.json'),
    '{"name": "p", "private": true, "type": "module"}',
  );
  await npm(['install', '--ignore-scripts', '--prefer-offline', tarball], project);
  await writeFile(
    join(project, 'main.js'),
    "import { VERSION, Sandbox, SandboxNotFoundError } from '@forkd/sdk';\n" +
      "console.log(VERSION, typeof Sandbox.create, new SandboxNotFoundError('x').code);\n",
  );
  const { stdout } = await exec(process.execPath, ['main.js'], { cwd: project, env: cleanEnv() });
  assert.equal(stdout, `${VERSION} function sandbox_not_found\n`);
  const sdk = join(project, 'node_modules', '@forkd', 'sdk');
  for (const f of ['README.md', 'dist/index.d.ts', 'dist/wire.js', 'dist/version.js']) {
    assert.ok(existsSync(join(sdk, f)), `${f} is in the SDK package`);
  }
});
