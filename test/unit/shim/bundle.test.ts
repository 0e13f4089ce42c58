/**
 * What the shim takes from an OCI process spec: args, env as a map, an absolute cwd, a
 * non-root uid as the exec's user; a spec without args is refused with InvalidArgument.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { processSpec } from '../../../src/shim/bundle.js';
import { CODE, TtrpcError } from '../../../src/shim/ttrpc.js';

test('a process spec becomes the exec the daemon runs', () => {
  const spec = processSpec(
    {
      args: ['sh', '-c', 'echo $A'],
      env: ['PATH=/bin:/usr/bin', 'A=x=y', 'junk', 7],
      cwd: '/work',
      user: { uid: 1000 },
      terminal: false,
    },
    'config.json',
  );
  assert.deepEqual(spec, {
    args: ['sh', '-c', 'echo $A'],
    env: { PATH: '/bin:/usr/bin', A: 'x=y' },
    cwd: '/work',
    user: '1000',
    terminal: false,
  });
});

test('root, a relative cwd and a terminal flag are read as the daemon means them', () => {
  const spec = processSpec({ args: ['true'], cwd: 'rel', user: { uid: 0 }, terminal: true }, 'x');
  assert.equal(spec.user, undefined);
  assert.equal(spec.cwd, undefined);
  assert.equal(spec.terminal, true);
});

test('a spec without args is InvalidArgument, naming where it came from', () => {
  for (const bad of [undefined, {}, { args: [] }, { args: [1] }]) {
    assert.throws(
      () => processSpec(bad as never, 'exec e1'),
      (e: TtrpcError) =>
        e.code === CODE.invalidArgument && /exec e1 has no process.args/.test(e.message),
    );
  }
});
