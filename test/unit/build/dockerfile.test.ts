/**
 * The Dockerfile parser and planner of `forkd build` (docs/build.md): what each instruction
 * becomes, variables expanded where Docker expands them, every refusal naming its line,
 * and `.dockerignore` matching. No I/O but a temp context directory.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseDockerfile } from '../../../src/services/build/dockerfile.js';
import { makePlan } from '../../../src/services/build/plan.js';
import { ignored, readIgnore, resolveCopy } from '../../../src/services/build/context.js';
import { isForkdError } from '../../../src/errors.js';

const plan = (text: string, args: Record<string, string> = {}) =>
  makePlan(parseDockerfile(text), args, { env: { PATH: '/bin' } });

/** The error a Dockerfile gets, with the line it names. */
function refusal(text: string): { line: unknown; message: string } {
  try {
    plan(text);
  } catch (e) {
    assert.ok(isForkdError(e));
    assert.equal(e.code, 'bad_request');
    return { line: e.details?.line, message: e.message };
  }
  assert.fail(`not refused: ${text}`);
}

test('instructions become steps with the state they run in', () => {
  const p = plan(
    [
      'ARG BASE=busybox',
      'FROM ${BASE}',
      'ARG WHO=world',
      'ENV GREETING="hello $WHO" EMPTY=',
      'WORKDIR /app',
      'WORKDIR sub',
      'USER 1000:1000',
      'COPY --chown=1000 a.txt b/ ./',
      'RUN echo $GREETING \\',
      '  && true',
      'RUN ["/bin/echo", "exec form"]',
      '# forkd:start --wait-port=8080 --timeout=30 httpd -f -p 8080',
      'EXPOSE 8080/tcp',
      'LABEL team=infra',
      'CMD ["httpd", "-f"]',
    ].join('\n'),
    { WHO: 'forkd' },
  );
  assert.equal(p.from, 'busybox');
  assert.deepEqual(p.unusedArgs, []);
  const kinds = p.steps.map((s) => s.action?.kind ?? null);
  assert.deepEqual(kinds, [
    null,
    null,
    null,
    null,
    null,
    'copy',
    'run',
    'run',
    'start',
    null,
    null,
    null,
  ]);
  const copy = p.steps[5];
  assert.deepEqual(copy?.action, {
    kind: 'copy',
    sources: ['a.txt', 'b/'],
    dest: '/app/sub/',
    add: false,
    chown: '1000',
  });
  const run = p.steps[6];
  assert.deepEqual(run?.action, {
    kind: 'run',
    argv: ['/bin/sh', '-c', 'echo $GREETING   && true'],
  });
  assert.equal(run?.env.GREETING, 'hello forkd');
  assert.equal(run?.env.WHO, 'forkd', 'ARGs are in the environment of RUN');
  assert.equal(run?.env.PATH, '/bin', "the base image's env is kept");
  assert.equal(run?.workdir, '/app/sub');
  assert.equal(run?.user, '1000:1000');
  assert.equal(run?.line, 9);
  assert.deepEqual(p.steps[8]?.action, {
    kind: 'start',
    argv: ['/bin/sh', '-c', 'httpd -f -p 8080'],
    ready: { kind: 'port', port: 8080 },
    timeoutS: 30,
  });
  assert.deepEqual(p.config.ports, [8080]);
  assert.deepEqual(p.config.cmd, ['httpd', '-f']);
  assert.deepEqual(p.config.labels, { team: 'infra' });
  assert.equal(p.config.env.WHO, undefined, 'ARGs are not in the final config');
  assert.equal(p.config.env.EMPTY, '');
});

test('a changed ENV changes the material of the steps after it, not before', () => {
  const a = plan('FROM busybox\nRUN one\nENV X=1\nRUN two');
  const b = plan('FROM busybox\nRUN one\nENV X=2\nRUN two');
  assert.equal(a.steps[0]?.material, b.steps[0]?.material);
  assert.notEqual(a.steps[2]?.material, b.steps[2]?.material);
});

test('single quotes, escapes and defaults expand as Docker does', () => {
  const p = plan("FROM busybox\nENV A='$HOME x' B=\\$lit C=${UNSET:-dflt} D=${PATH:+set}");
  assert.deepEqual(
    { A: p.config.env.A, B: p.config.env.B, C: p.config.env.C, D: p.config.env.D },
    { A: '$HOME x', B: '$lit', C: 'dflt', D: 'set' },
  );
  assert.equal(plan('FROM busybox\nENV K some value').config.env.K, 'some value');
});

test('bad Dockerfiles are refused naming the line', () => {
  assert.deepEqual(refusal('FROM busybox\n\nFROBNICATE x').line, 3);
  assert.match(
    refusal('FROM busybox\nFROBNICATE x').message,
    /line 2: unknown instruction FROBNICATE/,
  );
  assert.match(
    refusal('FROM busybox\nRUN --mount=type=cache x').message,
    /line 2: RUN does not take the flag --mount/,
  );
  assert.match(refusal('FROM busybox\nADD https://example.test/x /x').message, /remote URLs/);
  assert.match(refusal('FROM busybox\nVOLUME /data').message, /VOLUME/);
  assert.match(refusal('RUN x\nFROM busybox').message, /line 1: RUN before FROM/);
  assert.match(refusal('FROM a AS b\nRUN x').message, /multi-stage/);
  assert.match(refusal('FROM busybox\nFROM busybox').message, /line 2: multi-stage/);
  assert.match(refusal('FROM busybox\n# forkd:start --wait-port=99999 x').message, /--wait-port/);
  assert.match(refusal('FROM busybox\n# forkd:start --ready=x y').message, /does not take --ready/);
  assert.match(refusal('FROM busybox\n# forkd:warm x').message, /unknown forkd directive/);
  assert.match(refusal('FROM busybox\nRUN ["a", 1]').message, /JSON array of strings/);
  assert.match(refusal('FROM busybox\nEXPOSE http').message, /EXPOSE takes PORT/);
  assert.match(refusal('# just a comment').message, /no FROM/);
});

test('.dockerignore excludes, re-includes, and covers what is under a directory', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'forkd-build-unit-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, '.dockerignore'), '# comment\n*.log\n!keep.log\nsecret\n**/tmp\n');
  await mkdir(join(dir, 'secret'));
  await mkdir(join(dir, 'src/tmp'), { recursive: true });
  for (const f of ['a.log', 'keep.log', 'secret/key', 'src/main.py', 'src/tmp/x']) {
    await writeFile(join(dir, f), f);
  }
  const rules = await readIgnore(dir);
  assert.equal(ignored(rules, 'a.log'), true);
  assert.equal(ignored(rules, 'keep.log'), false);
  assert.equal(ignored(rules, 'secret/key'), true);
  assert.equal(ignored(rules, 'src/tmp/x'), true);
  assert.equal(ignored(rules, 'src/main.py'), false);
  const where = (m: string) => new Error(m);
  const all = await resolveCopy(dir, rules, ['.'], '/ctx/', where);
  const guests = all.entries.map((e) => e.guest).sort();
  assert.deepEqual(guests, [
    '/ctx',
    '/ctx/.dockerignore',
    '/ctx/keep.log',
    '/ctx/src',
    '/ctx/src/main.py',
  ]);
  const glob = await resolveCopy(dir, rules, ['*.log'], '/logs/', where);
  assert.deepEqual(
    glob.entries.map((e) => e.guest),
    ['/logs/keep.log'],
  );
  await assert.rejects(
    resolveCopy(dir, rules, ['secret/key'], '/k', where),
    /excluded by \.dockerignore/,
  );
  await assert.rejects(
    resolveCopy(dir, rules, ['../etc/passwd'], '/k', where),
    /outside the build context/,
  );
});
