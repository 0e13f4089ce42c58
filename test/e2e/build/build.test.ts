/**
 * `forkd build` end to end (docs/build.md), through the CLI and a daemon, real QEMU: a
 * 4-step Dockerfile (FROM the local busybox image, COPY a script, RUN it, start a server and
 * wait for its port) builds a snapshot whose forks answer on that port at once, with the
 * Dockerfile's USER, WORKDIR and ENV in their exec; a rebuild with nothing changed is all
 * CACHED; an edit of the last step re-runs only it; a changed copied file re-runs from its
 * COPY; a failing step stops the build with its output and exit code, keeps the steps
 * before it cached and publishes nothing; a bad instruction fails before any VM starts;
 * `build prune` removes only unused step snapshots; FROM an OCI image in a local registry
 * (docker-registry on loopback) is pulled and built on.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RegistryClient } from '../../../src/drivers/registry/index.js';
import { forkd as runCli } from '../../helpers/cli.js';
import { daemonForFile } from '../../helpers/daemon-process.js';
import { busyboxRoot } from '../images/fixtures.js';
import {
  layerFromDir,
  ociImage,
  push,
  startRegistry,
  type TestRegistry,
} from '../images/registry.js';

let reg: TestRegistry | undefined;
const file = daemonForFile({ cleanup: async () => reg?.stop() });
const ctx = { dir: '' };

interface Ev {
  type: string;
  step?: number;
  status?: string;
  instruction?: string;
}

async function cli(args: string[]) {
  const env = { ...file.home.env };
  delete env.FORKD_URL;
  return runCli(args, { env });
}

async function ok(args: string[]): Promise<string> {
  const r = await cli(args);
  assert.equal(r.code, 0, `forkd ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.toString();
}

/** `forkd build --json`: the status of each step that runs in a VM, in order. */
async function build(tag: string, extra: string[] = []): Promise<string[]> {
  const out = await ok(['build', '--json', '--tag', tag, ...extra, ctx.dir]);
  const lines = out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Ev & { steps?: unknown });
  const vm = lines.filter((e) => e.type === 'step_done' && e.status !== 'config');
  return vm.map((e) => e.status as string);
}

/** The server's page, fetched inside the sandbox once, with no retry. */
function pageOf(id: string): Promise<string> {
  return ok(['exec', id, '--', 'wget', '-q', '-O', '-', 'http://127.0.0.1:8080/index.html']);
}

async function forkOne(tag: string): Promise<string> {
  const forked = JSON.parse(await ok(['fork', tag, '--json'])) as { sandboxes: { id: string }[] };
  return forked.sandboxes[0]?.id ?? '';
}

const DOCKERFILE = (start: string) =>
  [
    'FROM busybox',
    'ENV GREETING=hello',
    'WORKDIR /srv',
    'COPY setup.sh ./setup.sh',
    'RUN sh setup.sh',
    'USER 1000',
    `# forkd:start --wait-port=8080 --timeout=120 ${start}`,
    'EXPOSE 8080',
  ].join('\n');

test('bad instructions are refused naming the line, before any VM starts', async () => {
  ctx.dir = await mkdtemp(join(tmpdir(), 'forkd-build-e2e-'));
  await writeFile(join(ctx.dir, 'Dockerfile'), 'FROM busybox\nRUN true\nFROBNICATE now\n');
  const r = await cli(['build', '--tag', 'never', ctx.dir]);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /Dockerfile line 3: unknown instruction FROBNICATE/);
  assert.equal((await ok(['ps', '--json'])).trim(), '[]', 'no sandbox was made');
  assert.equal((await ok(['snapshots', '--all', '--json'])).trim(), '[]', 'no snapshot was made');
});

test('a 4-step build: forks answer on the port at once, with USER, WORKDIR and ENV', async () => {
  await writeFile(
    join(ctx.dir, 'setup.sh'),
    'mkdir -p www && echo "v1 $GREETING" > www/index.html\n',
  );
  await writeFile(join(ctx.dir, 'Dockerfile'), DOCKERFILE('httpd -f -p 8080 -h /srv/www'));
  assert.deepEqual(await build('web'), ['ran', 'ran', 'ran']);
  const id = await forkOne('web');
  const page = await pageOf(id);
  assert.equal(page, 'v1 hello\n', 'the server started at build time answers in the fork at once');
  const where = await ok(['exec', id, '--', 'sh', '-c', 'echo "$(pwd) $(id -u) $GREETING"']);
  assert.equal(where, '/srv 1000 hello\n');
  await ok(['kill', id]);
  const listed = JSON.parse(await ok(['snapshots', '--json'])) as { tag: string }[];
  assert.deepEqual(
    listed.map((s) => s.tag),
    ['web'],
    'step snapshots are hidden by default',
  );
});

test('a rebuild with nothing changed is all CACHED', async () => {
  assert.deepEqual(await build('web'), ['cached', 'cached', 'cached']);
});

test('an edit of the last step re-runs only it', async () => {
  await writeFile(
    join(ctx.dir, 'Dockerfile'),
    DOCKERFILE('httpd -f -p 8080 -h /srv/www -c /dev/null'),
  );
  assert.deepEqual(await build('web'), ['cached', 'cached', 'ran']);
});

test('a changed copied file re-runs from its COPY', async () => {
  await writeFile(
    join(ctx.dir, 'setup.sh'),
    'mkdir -p www && echo "v2 $GREETING" > www/index.html\n',
  );
  assert.deepEqual(await build('web'), ['ran', 'ran', 'ran']);
  const id = await forkOne('web');
  const page = await pageOf(id);
  assert.equal(page, 'v2 hello\n');
  await ok(['kill', id]);
});

test('a failing step stops the build with its output and exit code; earlier steps stay cached', async () => {
  await writeFile(
    join(ctx.dir, 'Dockerfile'),
    'FROM busybox\nRUN echo one > /one\nRUN echo out-marker; exit 3\n',
  );
  const first = await cli(['build', '--tag', 'broken', ctx.dir]);
  assert.notEqual(first.code, 0);
  assert.match(first.stderr, /out-marker/);
  assert.match(first.stderr, /step 2 \(Dockerfile line 3\) failed: exit code 3/);
  const again = await cli(['build', '--json', '--tag', 'broken', ctx.dir]);
  assert.notEqual(again.code, 0);
  const events = again.stdout
    .toString()
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Ev);
  const done = events.filter((e) => e.type === 'step_done');
  assert.deepEqual(
    done.map((e) => e.status),
    ['cached'],
    'the step before the failure is cached',
  );
  const info = await cli(['snapshot', 'info', 'broken']);
  assert.equal(info.code, 3, 'nothing is published under the tag');
  const ps = JSON.parse(await ok(['ps', '--json'])) as { state: string }[];
  assert.deepEqual(
    ps.filter((s) => s.state === 'running'),
    [],
    'no worker sandbox is left',
  );
});

test('build prune removes the step snapshots nothing uses and keeps those a result is built on', async () => {
  const steps = async () =>
    (
      JSON.parse(await ok(['snapshots', '--all', '--json'])) as {
        tag: string;
        labels: Record<string, string>;
      }[]
    )
      .filter((s) => s.labels['forkd.build'] === 'step')
      .map((s) => s.tag);
  const before = await steps();
  const removed = (await ok(['build', 'prune'])).trim().split('\n').filter(Boolean);
  assert.ok(removed.length > 0, 'the chain of the replaced first build was unused');
  const after = await steps();
  assert.deepEqual([...after, ...removed].sort(), [...before].sort());
  const web = JSON.parse(await ok(['snapshot', 'info', 'web', '--json'])) as {
    ancestors: string[];
  };
  for (const a of web.ancestors)
    assert.ok(after.includes(a) || !a.startsWith('build-'), `${a} kept`);
  const id = await forkOne('web');
  assert.equal(await pageOf(id), 'v2 hello\n', 'the result still forks after the prune');
  await ok(['kill', id]);
});

test('FROM an OCI image in a local registry', async (t) => {
  reg = await startRegistry();
  const scratch = await mkdtemp(join(tmpdir(), 'forkd-build-oci-'));
  t.after(() => rm(scratch, { recursive: true, force: true }));
  const root = join(scratch, 'root');
  await busyboxRoot(root, ['sh', 'cat', 'echo', 'id', 'mkdir', 'pwd'], '/');
  await writeFile(join(root, 'marker'), 'from-the-registry\n');
  const layer = await layerFromDir(root, join(scratch, 'L1'), 'gzip');
  const image = ociImage([layer], { Env: ['PATH=/bin'], WorkingDir: '/app' });
  await push(new RegistryClient(reg.host), 'team/base', '1', image, scratch);
  await writeFile(
    join(ctx.dir, 'Dockerfile'),
    `FROM ${reg.host}/team/base:1\nRUN cat /marker > here.txt\n`,
  );
  assert.deepEqual(await build('fromreg'), ['ran']);
  const id = await forkOne('fromreg');
  assert.equal(await ok(['exec', id, '--', 'cat', 'here.txt']), 'from-the-registry\n');
  await ok(['kill', id]);
  await rm(ctx.dir, { recursive: true, force: true });
});
