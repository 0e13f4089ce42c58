/**
 * `forkd shell ID --list` as a user runs it, over the fake services: the sandbox's terminal
 * sessions as a table and as --json, and the flags it refuses.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cliOverFakes, out } from '../../helpers/fake-cli.js';
import { SEED } from '../../helpers/fake-services.js';

const { fake, forkd, json } = cliOverFakes('forkd-cli-shell-');

test('shell --list shows the terminal sessions, --json their wire form', async () => {
  fake.reset();
  assert.equal(
    out(await forkd('shell', SEED.sandbox, '--list')),
    'SESSION  PID  STATE  ATTACHED  OUTPUT  AGE\n',
  );
  const attached = fake.ptys.open(SEED.sandbox, {}, () => undefined);
  await fake.ptys.open(SEED.sandbox, {}, () => undefined).detach();
  const table = out(await forkd('shell', SEED.sandbox, '--list'));
  assert.match(table, /^SESSION\s+PID\s+STATE\s+ATTACHED\s+OUTPUT\s+AGE\n/);
  assert.match(
    table,
    new RegExp(`\\n${attached.session}\\s+100\\s+running\\s+yes\\s+0 B\\s+0s\\n`),
  );
  assert.match(table, /\s+running\s+no\s+/);
  const list = await json<{ session: string; attached: boolean }[]>(
    'shell',
    SEED.sandbox,
    '--list',
    '--json',
  );
  assert.deepEqual(
    list.map((s) => s.attached),
    [true, false],
  );
  assert.equal(list[0]?.session, attached.session);
});

test('shell --list refuses a command or --attach; --json alone is a usage error', async () => {
  fake.reset();
  assert.equal((await forkd('shell', SEED.sandbox, '--list', '--', 'ls')).code, 2);
  assert.equal((await forkd('shell', SEED.sandbox, '--list', '--attach', 'pty-1')).code, 2);
  assert.equal((await forkd('shell', SEED.sandbox, '--json')).code, 2);
  assert.equal((await forkd('shell', 'sbx-000000000000', '--list')).code, 3);
});
