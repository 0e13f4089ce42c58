/**
 * The unmodified `e2b` SDK's `Template.build` against a real `forkd daemon --e2b-listen`:
 * a template from a local forkd snapshot (busybox with a bash shim) with a copied file, a
 * RUN, envs, a workdir and a started httpd waited for by port, built by forkd's build
 * service and forked by `Sandbox.create(alias)` with httpd already up. A second build is
 * CACHED; a failing step is the SDK's BuildError with forkd's message; what forkd cannot
 * map (registry credentials, template tags) is refused before anything runs.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Snapshot } from '@forkd/sdk';
import { loadE2b, type E2bModule } from '../../helpers/e2b-sdk.js';
import { BASH_SHIM, startE2bListener, type E2bListener } from '../../helpers/e2b-listener.js';

const TOKEN = 'e2b-template-token-0123456789abcdef';
const BASE = 'tpl-base';
const ALIAS = 'tpl-web';

let listener: E2bListener | undefined;
let e2b: E2bModule;
let context: string;

before(async () => {
  e2b = await loadE2b('e2b');
  context = await mkdtemp(join(tmpdir(), 'forkd-e2b-template-'));
  await writeFile(join(context, 'hello.txt'), 'hello from the build context\n');
  listener = await startE2bListener(TOKEN);
  await Snapshot.create({ ...listener.forkd, tag: BASE, warm: [BASH_SHIM] });
});

after(async () => {
  await listener?.stop();
  await rm(context, { recursive: true, force: true });
});

function webTemplate() {
  return e2b
    .Template({ fileContextPath: context })
    .fromTemplate(BASE)
    .copy('hello.txt', '/app/www/hello.txt')
    .runCmd('wc -c < /app/www/hello.txt > /app/size.txt')
    .setEnvs({ GREETING: 'hi from a template' })
    .setWorkdir('/app')
    .setStartCmd('httpd -f -p 8080 -h /app/www', e2b.waitForPort(8080));
}

async function build(t: ReturnType<typeof webTemplate>, alias: string): Promise<string[]> {
  const logs: string[] = [];
  await e2b.Template.build(t, { alias, onBuildLogs: (e) => void logs.push(e.message) }).catch(
    (e: unknown) => {
      // The SDK's BuildError carries the user's frame as its stack: say the message too.
      if (e instanceof Error)
        e.stack = `${e.name}: ${e.message}\n${logs.slice(-15).join('\n')}\n${e.stack}`;
      throw e;
    },
  );
  return logs;
}

test('Template.build: fromTemplate, copy, runCmd, setEnvs, setWorkdir, setStartCmd; Sandbox.create forks it warm', async () => {
  assert.equal(await e2b.Template.exists(ALIAS), false);
  const logs = await build(webTemplate(), ALIAS);
  assert.ok(
    logs.some((l) => l.includes('httpd')),
    `the log shows the steps: ${logs.join('\n')}`,
  );
  assert.equal(await e2b.Template.exists(ALIAS), true);

  const sbx = await e2b.Sandbox.create(ALIAS, { timeoutMs: 120_000 });
  try {
    const run = async (cmd: string) => (await sbx.commands.run(cmd)).stdout;
    assert.equal(await run('cat www/hello.txt'), 'hello from the build context\n');
    assert.equal((await run('cat size.txt')).trim(), '29');
    assert.equal(await run('echo "$GREETING"'), 'hi from a template\n');
    assert.equal(await run('pwd'), '/app\n');
    // httpd was started at build time and runs in the fork, already listening.
    assert.equal(
      await run('wget -qO- http://127.0.0.1:8080/hello.txt'),
      'hello from the build context\n',
    );
  } finally {
    await sbx.kill();
  }

  // The same template again: every step CACHED, the upload skipped.
  const again = await build(webTemplate(), ALIAS);
  assert.ok(
    again.some((l) => l.includes('CACHED')),
    `the second build says CACHED: ${again.join('\n')}`,
  );
  assert.ok(again.some((l) => /already cached/.test(l)));
  assert.ok(!again.some((l) => /done in/.test(l)), `no step ran again: ${again.join('\n')}`);
});

test('a failing step is a BuildError with its output and exit code; unmappable options are refused', async () => {
  const bad = e2b
    .Template({ fileContextPath: context })
    .fromTemplate(BASE)
    .runCmd('echo bad-step-output; exit 7');
  await assert.rejects(build(bad, 'tpl-bad'), (e: unknown) => {
    assert.ok(e instanceof e2b.BuildError, String(e));
    assert.match(e.message, /exit code 7/);
    return true;
  });
  assert.equal(await e2b.Template.exists('tpl-bad'), false);

  const creds = e2b
    .Template({ fileContextPath: context })
    .fromImage('registry.example/app:1', { username: 'u', password: 'p' });
  await assert.rejects(build(creds, 'tpl-creds'), (e: unknown) => {
    assert.ok(e instanceof e2b.BuildError, String(e));
    assert.match(e.message, /registry credentials.*not supported/);
    return true;
  });
  await assert.rejects(e2b.Template.build(webTemplate(), 'tpl-web:v1'), /tags.*not supported/);
});
