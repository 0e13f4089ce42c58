/**
 * An image config's WorkingDir and User as the defaults of every command in its sandboxes
 * (docs/images.md "Config"): `user:group` runs as the user, an empty field is no default,
 * and what a request names wins.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { imageExecDefaults, type ImageManifest } from '../../../src/services/images/index.js';
import { withExecDefaults } from '../../../src/services/sandboxes/exec.js';

const image = (config?: ImageManifest['config']): ImageManifest => ({
  name: 'app',
  format: 'ext4',
  size_bytes: 0,
  disk_bytes: 0,
  created_at: '',
  source: { kind: 'dir', dir: '/x' },
  ...(config ? { config } : {}),
});

test("an image's WorkingDir and User; user:group is the user; none without a config", () => {
  const d = imageExecDefaults(image({ env: [], working_dir: '/app', user: 'app:staff' }));
  assert.deepEqual(d, { cwd: '/app', user: 'app' });
  assert.deepEqual(imageExecDefaults(image({ env: [], working_dir: '', user: '' })), {});
  assert.deepEqual(imageExecDefaults(image()), {});
});

type Req = { argv: string[]; cwd?: string; user?: string };

test('a request keeps what it names and gets the defaults for the rest', () => {
  const d = { cwd: '/app', user: '1000' };
  const run = (req: Req, defaults: { cwd?: string; user?: string }): Req =>
    withExecDefaults(req, defaults);
  assert.deepEqual(run({ argv: ['id'] }, d), { argv: ['id'], ...d });
  assert.deepEqual(run({ argv: ['id'], cwd: '/', user: 'root' }, d), {
    argv: ['id'],
    cwd: '/',
    user: 'root',
  });
  assert.deepEqual(run({ argv: ['id'], user: '0' }, d), {
    argv: ['id'],
    cwd: '/app',
    user: '0',
  });
  assert.deepEqual(run({ argv: ['id'] }, {}), { argv: ['id'] });
});
