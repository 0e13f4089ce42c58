/**
 * Conformance cases for what runs inside one sandbox (the guest-facing half of
 * SandboxService): its life and PATCH, streamed commands with stdin and kill, files with
 * owners and directories, terminal sessions, and the idle tiers. Each group boots one
 * sandbox and walks it through its steps, to keep the real run's VM time small.
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import type { ExecStream, PtyEnd, Subject } from './conformance-kit.js';
import { bytesOf, caller, rejectsWith, text, type Case } from './conformance-kit.js';

/** Drain a streamed command: its stdout as text and its exit event. */
async function drain(stream: ExecStream) {
  let stdout = '';
  for await (const e of stream.events) {
    if (e.type === 'stdout') stdout += e.data.toString('utf8');
    if (e.type === 'exit') return { stdout, exit: e };
  }
  throw new Error('the stream ended without an exit event');
}

/** Run `fn` on a fresh sandbox of the subject's image, killed afterwards whatever happened. */
async function withSandbox(s: Subject, fn: (id: string) => Promise<void>): Promise<void> {
  const sb = await s.services.sandboxes.create({ image: s.image }, caller);
  try {
    await fn(sb.id);
  } finally {
    await s.services.sandboxes.kill(sb.id);
  }
}

export function guestCases(it: Case): void {
  it('a sandbox is extended, limited and PATCHed in place; a stopped one refuses each change', async (s) => {
    const { sandboxes } = s.services;
    const sb = await sandboxes.create({ image: s.image, timeout_s: 120 }, caller);
    const at = (x: { expires_at: string | null }) => Date.parse(x.expires_at ?? '');
    const created = at(sb);
    const limits = structuredClone(sb.limits);
    try {
      const later = at(await sandboxes.extend(sb.id, 3600));
      assert.ok(later > created, 'extended');
      const same = await sandboxes.setLimits(sb.id, {});
      assert.deepEqual(same.limits, limits, 'fields left out keep their value');
      const patched = await sandboxes.update(sb.id, { timeout_s: 600 });
      assert.ok(at(patched) < later, 'a PATCHed timeout counts from now');
      assert.equal(patched.state, 'running');
      // A pause that holds its timeout (E2B's): no deadline until the wake gives it back.
      const held = await sandboxes.pause(sb.id, { holdTimeout: true });
      assert.deepEqual([held.tier, held.expires_at], ['paused', null]);
      const woken = await sandboxes.resume(sb.id);
      assert.ok(at(woken) > Date.now() && at(woken) <= Date.now() + 601_000, 'what was left');
      assert.equal(typeof (await sandboxes.consoleLog(sb.id)), 'string');
      const root = await sandboxes.guestUser(sb.id);
      assert.deepEqual([root.name, root.uid, root.gid], ['root', 0, 0]);
      await assert.rejects(sandboxes.guestUser(sb.id, 'nosuchuser'), rejectsWith('bad_request'));
    } finally {
      await sandboxes.kill(sb.id);
    }
    await assert.rejects(sandboxes.extend(sb.id, 60), rejectsWith('sandbox_not_running'));
    await assert.rejects(sandboxes.setLimits(sb.id, {}), rejectsWith('sandbox_not_running'));
    await assert.rejects(
      sandboxes.update(sb.id, { timeout_s: 60 }),
      rejectsWith('sandbox_not_running'),
    );
    assert.equal((await sandboxes.update(sb.id, {})).state, 'stopped', 'nothing to change');
  });

  it('a streamed command takes stdin to its end, is killed by a signal, and is gone after', (s) =>
    withSandbox(s, async (id) => {
      const { sandboxes } = s.services;
      const cat = await sandboxes.execStream(id, { argv: ['cat'], keep_stdin_open: true });
      assert.equal(typeof (await cat.pid), 'number');
      await sandboxes.writeStdin(id, cat.execId, Buffer.from('piped '), false);
      await sandboxes.writeStdin(id, cat.execId, Buffer.from('in\n'), true);
      const done = await drain(cat);
      assert.deepEqual([done.stdout, done.exit.exit_code], ['piped in\n', 0]);
      await assert.rejects(
        sandboxes.writeStdin(id, cat.execId, Buffer.from('late'), true),
        rejectsWith('exec_not_found'),
      );
      const long = await sandboxes.execStream(id, { argv: ['sleep', '600'] });
      await long.pid;
      await sandboxes.killExec(id, long.execId, 'SIGKILL');
      const killed = await drain(long);
      assert.deepEqual([killed.exit.exit_code, killed.exit.signal], [null, 'SIGKILL']);
      await assert.rejects(
        sandboxes.killExec(id, 'ex-0000000000ff', 'SIGKILL'),
        rejectsWith('exec_not_found'),
      );
      await assert.rejects(
        sandboxes.execStream(id, { argv: ['missing'] }),
        rejectsWith('command_not_found'),
      );
    }));

  it('directories are made with parents, listed with their kind and owners, removed recursively', (s) =>
    withSandbox(s, async (id) => {
      const { sandboxes } = s.services;
      await sandboxes.makeDir(id, '/tmp/conf/deep', { parents: true });
      assert.equal((await sandboxes.statFile(id, '/tmp/conf/deep')).kind, 'dir');
      const data = Buffer.from('nested\n');
      await sandboxes.writeFile(id, '/tmp/conf/deep/f.txt', Readable.from([data]), {});
      const st = await sandboxes.statFile(id, '/tmp/conf/deep/f.txt', { owners: true });
      assert.deepEqual([st.kind, st.size, st.owner, st.group], ['file', 7, 'root', 'root']);
      const plain = await sandboxes.statFile(id, '/tmp/conf/deep/f.txt');
      assert.equal(plain.owner, undefined, 'owners only when asked');
      const listed = await sandboxes.listFiles(id, '/tmp/conf', { owners: true });
      assert.deepEqual(
        listed.map((e) => [e.name, e.kind, e.owner]),
        [['deep', 'dir', 'root']],
      );
      assert.deepEqual(await bytesOf(await sandboxes.readFile(id, '/tmp/conf/deep/f.txt')), data);
      await sandboxes.removeFile(id, '/tmp/conf', { recursive: true });
      await assert.rejects(
        sandboxes.statFile(id, '/tmp/conf/deep/f.txt'),
        rejectsWith('guest_file_not_found'),
      );
      await assert.rejects(
        sandboxes.readFile(id, '/tmp/conf/none'),
        rejectsWith('guest_file_not_found'),
      );
    }));

  it('a terminal session echoes, is listed while it lives, and reports its exit code', (s) =>
    withSandbox(s, async (id) => {
      const { sandboxes } = s.services;
      let seen = '';
      const att = await sandboxes.pty(id, { cols: 80, rows: 24 }, (chunk) => {
        seen += chunk.toString('utf8');
      });
      const listed = await sandboxes.ptySessions(id);
      assert.ok(
        listed.some((p) => p.session === att.session && !p.exited),
        JSON.stringify(listed),
      );
      await att.resize(100, 30);
      await att.input(Buffer.from('echo conf-pty\n'));
      await att.input(Buffer.from('exit 3\n'));
      const end: PtyEnd = await att.ended;
      assert.equal(end.type, 'exit');
      assert.equal(end.type === 'exit' ? end.exit_code : -1, 3);
      assert.match(seen, /conf-pty/);
    }));

  it('a paused sandbox keeps its state, answers a second pause as it is, and resumes', (s) =>
    withSandbox(s, async (id) => {
      const { sandboxes } = s.services;
      const paused = await sandboxes.pause(id);
      assert.deepEqual([paused.state, paused.tier], ['running', 'paused']);
      assert.equal((await sandboxes.get(id)).tier, 'paused');
      assert.equal((await sandboxes.pause(id)).tier, 'paused');
      const awake = await sandboxes.resume(id);
      assert.deepEqual([awake.state, awake.tier], ['running', 'running']);
      assert.equal((await sandboxes.resume(id)).tier, 'running', 'a running one is a no-op');
      const r = await sandboxes.exec(id, { argv: ['echo', 'awake'] });
      assert.equal(text(r.stdout), 'awake\n');
    }));
}
