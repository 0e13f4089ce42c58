/**
 * E2B's template build request as a forkd Dockerfile (src/api/e2b/template-steps.ts): each
 * SDK step planned by forkd's own parser and planner as the SDK meant it, the SDK's ready
 * checks as forkd's native waits, `skipCache()` as --no-cache-from, failures pointed back
 * at the SDK's step, and what cannot map refused naming it. No I/O.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkDockerfile } from '../../../src/services/build/service.js';
import {
  parseTemplateStart,
  translate,
  type E2bTemplateStart,
} from '../../../src/api/e2b/template-steps.js';
import { isForkdError } from '../../../src/errors.js';

const HASH = 'a'.repeat(64);

const start = (over: Partial<E2bTemplateStart>): E2bTemplateStart => ({
  fromTemplate: 'base',
  steps: [],
  force: false,
  ...over,
});

test('each step as the SDK means it, planned by forkd', () => {
  const t = translate(
    start({
      steps: [
        {
          type: 'COPY',
          args: ['./app/*.py', '/srv/', 'user', '0755'],
          filesHash: HASH,
          force: false,
        },
        { type: 'RUN', args: ['echo "a b" | tr a-z A-Z\necho two'], force: false },
        { type: 'ENV', args: ['GREETING', 'say "hi"', 'P', '/opt/bin:$PATH'], force: false },
        { type: 'WORKDIR', args: ['/srv'], force: false },
        { type: 'RUN', args: ['id -u', 'root'], force: false },
        { type: 'USER', args: ['user'], force: false },
      ],
      startCmd: 'python3 -m http.server 8000',
      readyCmd: '[ -n "$(ss -Htuln sport = :8000)" ]',
    }),
    'nobody',
  );
  assert.deepEqual(t.hashes, [HASH]);
  const plan = checkDockerfile(t.dockerfile);
  assert.equal(plan.from, 'base');
  const actions = plan.steps.map((s) => s.action);
  assert.deepEqual(actions[0], {
    kind: 'copy',
    sources: [`${HASH}/app/*.py`],
    dest: '/srv/',
    add: false,
    chown: 'user',
    chmod: 0o755,
  });
  assert.deepEqual(actions[1], {
    kind: 'run',
    argv: ['/bin/sh', '-c', 'echo "a b" | tr a-z A-Z\necho two'],
  });
  assert.equal(plan.steps[2]?.config.env.GREETING, 'say "hi"');
  assert.equal(plan.steps[2]?.config.env.P, '/opt/bin:');
  // A RUN with its own user switches to it and back to the one in force.
  assert.deepEqual(
    plan.steps.slice(4, 7).map((s) => [s.text, s.user]),
    [
      ['USER root', 'root'],
      ['RUN ["/bin/sh","-c","id -u"]', 'root'],
      ['USER nobody', 'nobody'],
    ],
  );
  const last = plan.steps.at(-1);
  assert.equal(last?.user, 'user');
  assert.deepEqual(last?.action, {
    kind: 'start',
    argv: ['/bin/sh', '-c', 'python3 -m http.server 8000'],
    ready: { kind: 'port', port: 8000 },
    timeoutS: 120,
  });
  // forkd's steps back to the SDK's: the RUN with a user is SDK step 5 (its 5th call after FROM).
  assert.deepEqual([1, 5, 6, 7, 8, 9].map(t.e2bStep), ['1', '5', '5', '5', '6', 'finalize']);
});

test('ready checks: file and other commands; skipCache and force', () => {
  const file = translate(start({ startCmd: 'x', readyCmd: "[ -f '/tmp/it'\\''s up' ]" }), 'root');
  assert.deepEqual(checkDockerfile(file.dockerfile).steps[0]?.action, {
    kind: 'start',
    argv: ['/bin/sh', '-c', 'x'],
    ready: { kind: 'file', path: "/tmp/it's up" },
    timeoutS: 120,
  });
  const cmd = translate(start({ readyCmd: 'curl -sf "http://x/$P"' }), 'root');
  assert.deepEqual(checkDockerfile(cmd.dockerfile).steps[0]?.action, {
    kind: 'start',
    argv: ['/bin/sh', '-c', 'true'],
    ready: { kind: 'cmd', cmd: 'curl -sf "http://x/$P"' },
    timeoutS: 120,
  });
  const forced = translate(
    start({
      steps: [
        { type: 'RUN', args: ['a'], force: false },
        { type: 'RUN', args: ['b', 'u'], force: true },
        { type: 'RUN', args: ['c'], force: true },
      ],
    }),
    'root',
  );
  assert.equal(forced.noCacheFrom, 2);
  assert.equal(forced.noCache, false);
  assert.equal(translate(start({ force: true }), 'root').noCache, true);
});

test('what cannot map is refused, naming it', () => {
  const refused = (fn: () => unknown, code: string, re: RegExp) =>
    assert.throws(fn, (e: unknown) => isForkdError(e) && e.code === code && re.test(e.message));
  refused(
    () => parseTemplateStart({ fromImage: 'x', fromImageRegistry: { type: 'aws' } }),
    'bad_request',
    /registry credentials.*forkd login/,
  );
  refused(
    () => translate(start({ steps: [{ type: 'ARG', args: ['A'], force: false }] }), 'root'),
    'bad_request',
    /template step ARG/,
  );
  refused(
    () => translate(start({ steps: [{ type: 'COPY', args: ['a', 'b'], force: false }] }), 'root'),
    'bad_request',
    /hash/,
  );
  refused(
    () => translate(start({ steps: [{ type: 'ENV', args: ['A', 'x\ny'], force: false }] }), 'root'),
    'bad_request',
    /newline/,
  );
  refused(() => translate(start({ fromTemplate: undefined }), 'root'), 'bad_request', /fromImage/);
  refused(() => parseTemplateStart({ steps: [{ type: 1 }] }), 'bad_request', /steps\[0\]\.type/);
});
