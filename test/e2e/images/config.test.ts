/**
 * An image config's WorkingDir and User apply to every command, as Docker applies them to
 * `docker run IMG CMD` and `docker exec`: `forkd run --image app -- CMD` (in this process
 * and through a daemon), `create` + `exec`, and the forks of a snapshot of the image; `--cwd`
 * and `--user` override them. The image is a busybox tree imported from an OCI layout
 * written here, whose config sets `WorkingDir: /app` and `User: app:app` (uid 1000, whose
 * home is `/`, so the agent's own default cwd would differ).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { importImage } from '../../../src/services/images/index.js';
import { forkd as runCli } from '../../helpers/cli.js';
import { daemonForFile } from '../../helpers/daemon-process.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';
import { busyboxRoot } from './fixtures.js';
import { layerFromDir, ociImage, writeLayout } from './registry.js';

const WHERE = 'echo "$(pwd) $(id -u)"';
const APPLETS = ['sh', 'echo', 'id', 'pwd', 'true'];

/** The image `app`: busybox, a user `app`, `/app`; its config names both. */
async function importApp(home: TestHome): Promise<void> {
  const scratch = await mkdtemp(join(tmpdir(), 'forkd-image-config-'));
  try {
    const root = join(scratch, 'root');
    await busyboxRoot(root, APPLETS, '/');
    const layer = await layerFromDir(root, join(scratch, 'L1'), 'gzip');
    const config = { Env: ['PATH=/bin'], WorkingDir: '/app', User: 'app:app', Cmd: ['true'] };
    await writeLayout(join(scratch, 'layout'), ociImage([layer], config), 'app:1');
    await importImage(home.paths, { path: join(scratch, 'layout'), name: 'app' });
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

const file = daemonForFile({ prepare: importApp });

/** `forkd ARGS…` as a user in `home` (default: the file's, whose daemon it finds) runs it. */
async function forkd(args: string[], home: TestHome = file.home): Promise<string> {
  const env = { ...home.env };
  delete env.FORKD_URL;
  const r = await runCli(args, { env });
  assert.equal(r.code, 0, `forkd ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.toString();
}

test('forkd run applies WorkingDir and User to a given command; --cwd and --user win', async () => {
  const via = await forkd(['run', '--image', 'app', '--', 'sh', '-c', WHERE]);
  assert.equal(via, '/app 1000\n', 'through the daemon');
  const flags = ['--cwd', '/', '--user', 'root'];
  const over = await forkd(['run', '--image', 'app', ...flags, '--', 'sh', '-c', WHERE]);
  assert.equal(over, '/ 0\n');
});

test('forkd run with no daemon applies them the same way', async (t) => {
  // Another home with the same image and no daemon: `run` boots in its own process.
  const alone = await makeTestHome();
  t.after(() => alone.cleanup());
  await symlink(join(file.home.paths.images, 'app'), join(alone.paths.images, 'app'));
  const local = await forkd(['run', '--image', 'app', '--', 'sh', '-c', WHERE], alone);
  assert.equal(local, '/app 1000\n');
});

test('create + exec and the forks of a snapshot of the image run there and as that user', async () => {
  const { id } = JSON.parse(await forkd(['create', '--image', 'app', '--json'])) as { id: string };
  assert.equal(await forkd(['exec', id, '--', 'sh', '-c', WHERE]), '/app 1000\n');
  const over = ['--cwd', '/', '--user', '0'];
  assert.equal(await forkd(['exec', id, ...over, '--', 'sh', '-c', WHERE]), '/ 0\n');
  await forkd(['kill', id]);
  await forkd(['snapshot', 'create', '--tag', 'appsnap', '--image', 'app', '--json']);
  const forked = JSON.parse(await forkd(['fork', 'appsnap', '--json'])) as {
    sandboxes: { id: string }[];
  };
  const child = forked.sandboxes[0]?.id ?? '';
  assert.equal(await forkd(['exec', child, '--', 'sh', '-c', WHERE]), '/app 1000\n');
  await forkd(['kill', child]);
  await forkd(['rmi', 'appsnap']);
});
