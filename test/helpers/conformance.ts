/**
 * One conformance suite for the service interfaces (src/services/contracts.ts): the same
 * cases run against the fake services that back the API, CLI, SDK and MCP tests
 * (test/api/conformance.test.ts) and against the real services with real VMs
 * (test/e2e/services/conformance.test.ts), so the fake cannot drift from what the real
 * ones do. Each case states what a user of the API would see. The API run lists the fake's
 * methods no case calls (it must stay the documented few, EXEMPT in that test).
 *
 * Method → case (cases in this file, conformance-guest.ts and conformance-host.ts):
 * | methods                                                      | case                                    |
 * | sandboxes.create/get/list/kill, exec                         | a created sandbox runs…; exec answers…  |
 * | events.subscribe                                             | a subscriber sees a sandbox created…    |
 * | sandboxes.extend/setLimits/update/consoleLog/guestUser, pause holdTimeout | a sandbox is extended, limited, PATCHed |
 * | sandboxes.execStream/writeStdin/killExec                     | a streamed command takes stdin…         |
 * | sandboxes.writeFile/readFile/statFile/listFiles/removeFile    | files written are read back…            |
 * | sandboxes.makeDir, statFile/listFiles owners, recursive rm   | directories are made with parents…      |
 * | sandboxes.pty/ptySessions                                    | a terminal session echoes…              |
 * | sandboxes.pause/resume                                       | a paused sandbox keeps its state…       |
 * | snapshots.get/fork/remove, sandbox/snapshot not found        | forks run from…; unknown ids…           |
 * | snapshots.list/verify/setPool/poolBudget/create/compact/lineage | a snapshot is listed, verifies…         |
 * | branch.branch, snapshots.lineage                             | a branch is a snapshot of its source…   |
 * | network.get/patch/publish/unpublish/reach/denied/refused      | a network policy is patched…            |
 * | images.list/get/remove/create/prune/captureBootSnapshot      | images are listed and inspected…        |
 * | packs.pack/unpack/cacheInfo/pruneCache                       | packs of unknown snapshots…             |
 * | builds.build/prune                                           | a build context that is not a tar…      |
 * | contexts.* (all eight)                                       | contexts belong to running sandboxes…   |
 * | host.qemuVersion/accel/sandboxCounts/sandboxUsage/doctor/bench | the host reports its QEMU…            |
 * | images.login/logout/pull/import, packs.pull/push             | with no registry listening…             |
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { guestCases } from './conformance-guest.js';
import { hostCases } from './conformance-host.js';
import {
  bytesOf,
  caller,
  recording,
  rejectsWith,
  text,
  type Case,
  type Subject,
} from './conformance-kit.js';

export type { Subject } from './conformance-kit.js';

/** Register every case; `subject` is called once the test file's `before` has run. */
export function conformance(kind: string, subject: () => Subject): void {
  let recorded: Subject | undefined;
  const it: Case = (name, fn) =>
    test(`[${kind}] ${name}`, () => {
      const s = subject();
      recorded ??= { ...s, services: recording(s.services) };
      return fn(recorded);
    });

  it('a created sandbox runs, is listed by label, and stays listed as stopped once killed', async (s) => {
    const { sandboxes } = s.services;
    const sb = await sandboxes.create({ image: s.image, labels: { conf: 'life' } }, caller);
    assert.equal(sb.state, 'running');
    assert.equal(sb.image, s.image);
    assert.deepEqual((await sandboxes.get(sb.id)).labels, { conf: 'life' });
    const listed = await sandboxes.list({ label: { key: 'conf', value: 'life' } });
    assert.deepEqual(
      listed.map((x) => x.id),
      [sb.id],
    );
    await sandboxes.kill(sb.id);
    assert.equal((await sandboxes.get(sb.id)).state, 'stopped');
    await sandboxes.kill(sb.id); // a retried kill succeeds
    await assert.rejects(
      sandboxes.exec(sb.id, { argv: ['true'] }),
      rejectsWith('sandbox_not_running'),
    );
    assert.deepEqual(
      await sandboxes.list({ state: 'running', label: { key: 'conf', value: 'life' } }),
      [],
    );
  });

  it('a subscriber sees a sandbox created and stopped, and nothing once it unsubscribed', async (s) => {
    const { sandboxes, events } = s.services;
    if (!events) return;
    const seen: { id: string; op: string; state: string | null }[] = [];
    const stop = events.subscribe((e) => seen.push({ id: e.id, op: e.op, state: e.state }));
    const sb = await sandboxes.create({ image: s.image }, caller);
    await sandboxes.kill(sb.id);
    stop();
    const mine = seen.filter((e) => e.id === sb.id);
    assert.ok(
      mine.some((e) => e.op === 'created'),
      JSON.stringify(mine),
    );
    assert.ok(
      mine.some((e) => e.op === 'updated' && e.state === 'stopped'),
      JSON.stringify(mine),
    );
    const count = seen.length;
    await sandboxes.kill((await sandboxes.create({ image: s.image }, caller)).id);
    assert.equal(seen.length, count, 'unsubscribed');
  });

  it('exec answers with the exit code and output; a missing command is command_not_found', async (s) => {
    const { sandboxes } = s.services;
    const sb = await sandboxes.create({ image: s.image }, caller);
    try {
      const r = await sandboxes.exec(sb.id, { argv: ['echo', 'hello', 'conformance'] });
      assert.equal(r.exit_code, 0);
      assert.equal(text(r.stdout), 'hello conformance\n');
      await assert.rejects(
        sandboxes.exec(sb.id, { argv: ['missing'] }),
        rejectsWith('command_not_found'),
      );
    } finally {
      await sandboxes.kill(sb.id);
    }
  });

  it('files written are read back, stat and listed; removed ones are guest_file_not_found', async (s) => {
    const { sandboxes } = s.services;
    const sb = await sandboxes.create({ image: s.image }, caller);
    try {
      const data = Buffer.from('conformance bytes\n');
      assert.equal(
        await sandboxes.writeFile(sb.id, '/tmp/conf.txt', Readable.from([data]), {}),
        data.length,
      );
      assert.deepEqual(await bytesOf(await sandboxes.readFile(sb.id, '/tmp/conf.txt')), data);
      const st = await sandboxes.statFile(sb.id, '/tmp/conf.txt');
      assert.deepEqual([st.name, st.kind, st.size], ['conf.txt', 'file', data.length]);
      const names = (await sandboxes.listFiles(sb.id, '/tmp')).map((e) => e.name);
      assert.ok(names.includes('conf.txt'), names.join(' '));
      await sandboxes.removeFile(sb.id, '/tmp/conf.txt', {});
      await assert.rejects(
        sandboxes.statFile(sb.id, '/tmp/conf.txt'),
        rejectsWith('guest_file_not_found'),
      );
    } finally {
      await sandboxes.kill(sb.id);
    }
  });

  it('unknown ids and tags are not_found errors of their kind', async (s) => {
    await assert.rejects(
      s.services.sandboxes.get('sbx-0000000000ff'),
      rejectsWith('sandbox_not_found'),
    );
    await assert.rejects(
      s.services.snapshots.get('no-such-tag'),
      rejectsWith('snapshot_not_found'),
    );
    await assert.rejects(
      s.services.snapshots.fork({ snapshot: 'no-such-tag', n: 1 }, caller),
      rejectsWith('snapshot_not_found'),
    );
  });

  it('forks run from their snapshot, which counts them and refuses removal until they end', async (s) => {
    const { sandboxes, snapshots } = s.services;
    const r = await snapshots.fork(
      { snapshot: s.snapshot, n: 2, labels: { conf: 'fork' } },
      caller,
    );
    try {
      assert.deepEqual(r.failed, []);
      assert.equal(r.sandboxes.length, 2);
      for (const child of r.sandboxes) {
        assert.deepEqual([child.state, child.snapshot], ['running', s.snapshot]);
        assert.equal(child.labels.conf, 'fork');
      }
      // Children of one request are found by it, even had the daemon died before answering.
      const request = r.sandboxes.map((c) => c.labels['forkd.request']);
      assert.match(request[0] ?? '', /^req-/);
      assert.equal(new Set(request).size, 1, 'siblings carry one request id');
      assert.equal((await snapshots.get(s.snapshot)).children_alive, 2);
      await assert.rejects(snapshots.remove(s.snapshot, {}), rejectsWith('snapshot_in_use'));
    } finally {
      await Promise.all(r.sandboxes.map((c) => sandboxes.kill(c.id)));
    }
    assert.equal((await snapshots.get(s.snapshot)).children_alive, 0);
  });

  it('a branch is a snapshot of its running source, in the lineage, removable while the source runs', async (s) => {
    const { sandboxes, snapshots, branch } = s.services;
    const [source] = (await snapshots.fork({ snapshot: s.snapshot, n: 1 }, caller)).sandboxes;
    assert.ok(source);
    try {
      const b = await branch.branch(source.id, { tag: 'conf-branch' }, caller);
      assert.deepEqual(
        [b.snapshot.tag, b.snapshot.state, b.snapshot.parent, b.snapshot.source_sandbox],
        ['conf-branch', 'ready', s.snapshot, source.id],
      );
      assert.equal((await sandboxes.get(source.id)).state, 'running', 'the source keeps running');
      // Its disk now layers on the branch, but nothing was forked from it: no child of it.
      assert.equal((await snapshots.get('conf-branch')).children_alive, 0);
      assert.equal((await snapshots.get(s.snapshot)).children_alive, 1, 'the source, forked');
      const nodes = (await snapshots.lineage(s.snapshot)).nodes;
      const node = nodes.find((n) => n.id === 'conf-branch');
      assert.deepEqual(node?.parent, { kind: 'snapshot', id: s.snapshot });
      // Not pinned: its layer is folded into the source, which runs on and branches again.
      await snapshots.remove('conf-branch', {});
      await assert.rejects(snapshots.get('conf-branch'), rejectsWith('snapshot_not_found'));
      assert.equal((await sandboxes.get(source.id)).state, 'running', 'the source runs on');
      const again = await branch.branch(source.id, { tag: 'conf-branch2' }, caller);
      assert.equal(again.snapshot.parent, s.snapshot);
      await snapshots.remove('conf-branch2', {});
    } finally {
      await sandboxes.kill(source.id);
    }
  });

  guestCases(it);
  hostCases(it);
}
