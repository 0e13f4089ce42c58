/**
 * Every code block in the READMEs and docs/ is either run here or marked as an excerpt, so
 * what a new user copies works as written. The comment on the line before a block says
 * which: `<!-- run -->` (sh blocks run in bash with `forkd` on PATH and in a fresh
 * FORKD_HOME, as a user would type them; js blocks run with plain Node 20 against a real
 * daemon, importing @forkd/sdk), `<!-- typecheck -->` (ts blocks compiled against the
 * SDK's types, not run), `<!-- excerpt -->` (fragments: not run). A block with no marker
 * fails the first test. Real daemon, real VMs.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink, writeFile, cp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { CLI } from '../../helpers/cli.js';
import { startDaemon } from '../../helpers/daemon-process.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';

const REPO = process.cwd();
const FILES = [
  'README.md',
  'packages/sdk/README.md',
  'agent/README.md',
  'agent/PROTOCOL.md',
  ...readdirSync('docs')
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const MARKER = /^<!--\s*(run|excerpt|typecheck)\b.*-->$/;

interface Block {
  file: string;
  line: number;
  lang: string;
  marker: string | undefined;
  code: string;
}

/** The fenced blocks of a Markdown file, each with the marker on the line before it. */
function blocksOf(file: string): Block[] {
  const lines = readFileSync(file, 'utf8').split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^\s*(`{3,}|~{3,})(\S*)/.exec(lines[i] ?? '');
    if (!open) continue;
    const fence = open[1] ?? '```';
    let end = i + 1;
    while (end < lines.length && lines[end]?.trim() !== fence) end++;
    let prev = i - 1;
    while (prev >= 0 && lines[prev]?.trim() === '') prev--;
    const marker = MARKER.exec(lines[prev]?.trim() ?? '')?.[1];
    blocks.push({
      file,
      line: i + 1,
      lang: open[2] ?? '',
      marker,
      code: lines.slice(i + 1, end).join('\n'),
    });
    i = end;
  }
  return blocks;
}

const BLOCKS = FILES.flatMap(blocksOf);
const where = (b: Block) => `${b.file}:${b.line}`;
const homes: TestHome[] = [];
const dirs: string[] = [];

after(async () => {
  for (const h of homes) await h.cleanup();
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

test('every code block is run, type-checked or marked as an excerpt', () => {
  const unmarked = BLOCKS.filter((b) => !b.marker).map(where);
  assert.deepEqual(unmarked, [], 'add <!-- run -->, <!-- typecheck --> or <!-- excerpt -->');
  const wrong = BLOCKS.filter(
    (b) =>
      // python blocks are run by the Python suite (packages/python/tests/test_docs.py).
      (b.marker === 'run' && !['sh', 'js', 'python'].includes(b.lang)) ||
      (b.marker === 'typecheck' && b.lang !== 'ts'),
  ).map(where);
  assert.deepEqual(wrong, [], 'run takes sh, js or python blocks, typecheck ts blocks');
  const awaitUsing = BLOCKS.filter((b) => b.lang === 'js' && /await using/.test(b.code));
  assert.deepEqual(awaitUsing.map(where), [], 'Node 20 cannot parse `await using`');
});

/** Runs a command in its own process group, killed whole if the test gives up. */
function run(
  cmd: string,
  args: string[],
  opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number },
): Promise<{ code: number | null; output: string }> {
  return new Promise((done, fail) => {
    const child = spawn(cmd, args, { ...opts, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const keep = (d: Buffer) => (output = (output + d.toString()).slice(-20_000));
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const timer = setTimeout(() => process.kill(-(child.pid ?? 0), 'SIGKILL'), opts.timeoutMs);
    child.on('error', fail);
    child.on('close', (code) => {
      clearTimeout(timer);
      // A daemon a block started in the background goes with its group.
      try {
        process.kill(-(child.pid ?? 0), 'SIGKILL');
      } catch {
        // the group is gone already
      }
      done({ code, output });
    });
  });
}

/**
 * A scratch directory like a clone: the docs, dist/ where the README's alias points, and
 * packages/ (the Python SDK a block puts on PYTHONPATH).
 */
async function workDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-docs-'));
  dirs.push(dir);
  await cp('README.md', join(dir, 'README.md'));
  await cp('docs', join(dir, 'docs'), { recursive: true });
  await symlink(resolve('dist'), join(dir, 'dist'));
  await symlink(resolve('packages'), join(dir, 'packages'));
  const bin = join(dir, 'bin');
  await mkdir(bin);
  await writeFile(join(bin, 'forkd'), `#!/bin/sh\nexec "${process.execPath}" "${CLI}" "$@"\n`, {
    mode: 0o755,
  });
  // @forkd/sdk resolves as it would in a project that installed it.
  await mkdir(join(dir, 'node_modules', '@forkd'), { recursive: true });
  await symlink(resolve('packages/sdk'), join(dir, 'node_modules', '@forkd', 'sdk'));
  return dir;
}

async function freshHome(): Promise<TestHome> {
  const home = await makeTestHome();
  homes.push(home);
  return home;
}

for (const block of BLOCKS.filter((b) => b.marker === 'run' && b.lang === 'sh')) {
  test(`runs ${where(block)} (sh)`, async () => {
    const dir = await workDir();
    const home = await freshHome();
    const script = `set -eo pipefail\nshopt -s expand_aliases\n${block.code}\n`;
    const env: NodeJS.ProcessEnv = { ...home.env, PATH: `${join(dir, 'bin')}:${process.env.PATH}` };
    delete env.FORKD_URL; // the block finds its own daemon, on the home's socket
    const r = await run('bash', ['-c', script], { cwd: dir, env, timeoutMs: 600_000 });
    assert.equal(r.code, 0, r.output);
  });
}

for (const block of BLOCKS.filter((b) => b.marker === 'run' && b.lang === 'js')) {
  test(`runs ${where(block)} (js, Node 20)`, async () => {
    const dir = await workDir();
    const home = await freshHome();
    const daemon = await startDaemon(home);
    try {
      await writeFile(join(dir, 'example.mjs'), block.code);
      const env = { ...home.env, FORKD_URL: daemon.url };
      const r = await run(process.execPath, ['example.mjs'], { cwd: dir, env, timeoutMs: 300_000 });
      assert.equal(r.code, 0, r.output);
    } finally {
      await daemon.stop();
    }
  });
}

test('the ts blocks type-check against the SDK', async () => {
  const typed = BLOCKS.filter((b) => b.marker === 'typecheck');
  const dir = await workDir();
  const names = await Promise.all(
    typed.map(async (b, i) => {
      const name = `block${i}.ts`;
      await writeFile(join(dir, name), `// ${where(b)}\n${b.code}\nexport {};\n`);
      return name;
    }),
  );
  const config = {
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      lib: ['ES2022', 'esnext.disposable'],
      types: ['node'],
      typeRoots: [join(REPO, 'node_modules', '@types')],
      strict: true,
      noEmit: true,
      skipLibCheck: true,
    },
    files: names,
  };
  await writeFile(join(dir, 'tsconfig.json'), JSON.stringify(config));
  await writeFile(join(dir, 'package.json'), '{"type": "module"}');
  const tsc = join(REPO, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = await run(process.execPath, [tsc, '-p', dir], {
    cwd: dir,
    env: process.env,
    timeoutMs: 120_000,
  });
  assert.equal(r.code, 0, r.output);
});
