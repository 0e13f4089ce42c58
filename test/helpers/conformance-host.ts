/**
 * Conformance cases for what the daemon keeps beside the guests: a sandbox's network
 * (egress, published ports, the daemon's way in), snapshot bookkeeping (list, verify, pool,
 * compact, lineage), images, packs, builds, code contexts and the host facts. Most run no
 * VM at all; the network group shares one sandbox.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { caller, rejectsWith, type Case } from './conformance-kit.js';

const NO_SANDBOX = 'sbx-0000000000fe';
/** Loopback's discard port: no registry listens there (the fake treats it so too). */
const NO_REGISTRY = '127.0.0.1:9';

export function hostCases(it: Case): void {
  it('a network policy is patched at run time; a published port is listed, reached and withdrawn', async (s) => {
    const { sandboxes, network } = s.services;
    if (!network) return; // a daemon without networking offers none of this
    const sb = await sandboxes.create({ image: s.image, network: 'nat' }, caller);
    try {
      const before = await network.get(sb.id);
      assert.equal(before.mode, 'nat');
      assert.deepEqual(before.ports, []);
      const after = await network.patch(sb.id, { deny_out: ['10.9.0.0/16'] });
      assert.ok(after.egress.deny_out.includes('10.9.0.0/16'), JSON.stringify(after.egress));
      const published = await network.publish(sb.id, 8080);
      assert.equal(published.port, 8080);
      assert.equal(typeof published.host_port, 'number');
      assert.deepEqual(
        (await network.get(sb.id)).ports.map((p) => p.port),
        [8080],
      );
      const way = await network.reach(sb.id, 8080);
      assert.deepEqual([typeof way.host, typeof way.port], ['string', 'number']);
      await network.unpublish(sb.id, 8080);
      assert.deepEqual((await network.get(sb.id)).ports, []);
      assert.equal(typeof (await network.deniedCounts()), 'object');
      assert.equal(typeof (await network.refusedCounts()), 'object');
    } finally {
      await sandboxes.kill(sb.id);
    }
    await assert.rejects(network.get(NO_SANDBOX), rejectsWith('sandbox_not_found'));
  });

  it('a snapshot is listed, verifies, takes a pool within the host pool budget, compacts to a standalone copy, and refuses a taken tag', async (s) => {
    const { snapshots } = s.services;
    const tags = (await snapshots.list()).map((x) => x.tag);
    assert.ok(tags.includes(s.snapshot), tags.join(' '));
    assert.deepEqual(await snapshots.verify(s.snapshot), { ok: true, problems: [] });
    const pool = await snapshots.setPool(s.snapshot, 0);
    assert.deepEqual([pool.size, pool.ready], [0, 0]);
    const budget = snapshots.poolBudget();
    assert.ok(budget.vms >= 1 && budget.used_vms <= budget.vms, JSON.stringify(budget));
    assert.ok(budget.used_memory_bytes <= budget.memory_bytes, JSON.stringify(budget));
    await assert.rejects(
      snapshots.create({ tag: s.snapshot, image: s.image }, caller),
      rejectsWith('name_taken'),
    );
    await assert.rejects(snapshots.verify('no-such-tag'), rejectsWith('snapshot_not_found'));
    const copy = await snapshots.compact(s.snapshot, 'conf-compact', caller);
    try {
      assert.deepEqual([copy.tag, copy.state, copy.parent], ['conf-compact', 'ready', null]);
      await assert.rejects(
        snapshots.compact(s.snapshot, 'conf-compact', caller),
        rejectsWith('name_taken'),
      );
      const nodes = (await snapshots.lineage()).nodes;
      assert.ok(nodes.some((n) => n.kind === 'image' && n.id === s.image));
      assert.ok(nodes.some((n) => n.kind === 'snapshot' && n.id === 'conf-compact'));
    } finally {
      await snapshots.remove('conf-compact', {});
    }
  });

  it('images are listed and inspected; unknown ones are image_not_found (a boot snapshot of one too); a taken name needs force, a missing tree is bad_request', async (s) => {
    const { images } = s.services;
    assert.ok((await images.list()).some((i) => i.name === s.image));
    assert.equal((await images.get(s.image)).name, s.image);
    await assert.rejects(images.get('no-such-image'), rejectsWith('image_not_found'));
    await assert.rejects(images.remove('no-such-image'), rejectsWith('image_not_found'));
    await assert.rejects(
      images.captureBootSnapshot('no-such-image', {}),
      rejectsWith('image_not_found'),
    );
    const tree = await mkdtemp(join(tmpdir(), 'forkd-conf-'));
    try {
      await assert.rejects(
        images.create({ name: s.image, from_dir: tree }),
        rejectsWith('name_taken'),
      );
    } finally {
      await rm(tree, { recursive: true, force: true });
    }
    await assert.rejects(
      images.create({ name: 'conf-image', from_dir: '/nonexistent-conf' }),
      rejectsWith('bad_request'),
    );
    const pruned = await images.prune();
    assert.deepEqual([typeof pruned.blobs, typeof pruned.bytes], ['number', 'number']);
    assert.ok(Array.isArray(pruned.images));
  });

  it('packs of unknown snapshots and files are refused; the node cache reports and prunes', async (s) => {
    const { packs } = s.services;
    if (!packs) return;
    await assert.rejects(
      packs.pack('no-such-tag', '/tmp/conf-none.pack'),
      rejectsWith('snapshot_not_found'),
    );
    await assert.rejects(
      packs.unpack('/nonexistent-conf/x.pack', { tag: 'conf-unpacked' }),
      rejectsWith('bad_request'),
    );
    const info = await packs.cacheInfo();
    assert.ok(Array.isArray(info.entries));
    assert.equal(typeof info.bytes, 'number');
    const pruned = await packs.pruneCache({});
    assert.ok(Array.isArray(pruned.removed));
  });

  it('a build context that is not a tar stream is bad_request; prune answers the tags it removed', async (s) => {
    const { builds } = s.services;
    if (!builds) return;
    await assert.rejects(
      builds.build({}, Readable.from([Buffer.from('not a tar stream')]), caller),
      rejectsWith('bad_request'),
    );
    assert.ok(Array.isArray(await builds.prune()));
  });

  it('contexts belong to running sandboxes: an unknown one is sandbox_not_found for every call', async (s) => {
    const { contexts } = s.services;
    const calls: (() => Promise<unknown>)[] = [
      () => contexts.create(NO_SANDBOX, {}),
      () => contexts.list(NO_SANDBOX),
      () => contexts.restart(NO_SANDBOX, 'python'),
      () => contexts.remove(NO_SANDBOX, 'python'),
      () => contexts.interrupt(NO_SANDBOX, 'python'),
      () => contexts.eval(NO_SANDBOX, { code: '1' }),
      () => contexts.evalStream(NO_SANDBOX, { code: '1' }),
      () => contexts.evalFork(NO_SANDBOX, { variants: ['1', '2'] }, caller),
    ];
    for (const call of calls) await assert.rejects(call(), rejectsWith('sandbox_not_found'));
  });

  it('with no registry listening, login and pulls and pushes are registry_unreachable; logout is not', async (s) => {
    const { images, packs } = s.services;
    await assert.rejects(
      images.login({ registry: NO_REGISTRY, username: 'conf', password: 'conf' }),
      rejectsWith('registry_unreachable'),
    );
    await images.logout(NO_REGISTRY); // nothing to forget is no error
    await assert.rejects(
      images.pull({ reference: `${NO_REGISTRY}/conf/none:1` }),
      rejectsWith('registry_unreachable'),
    );
    await assert.rejects(
      images.import({ path: '/nonexistent-conf/image.tar' }),
      rejectsWith('bad_request'),
    );
    if (!packs) return;
    await assert.rejects(
      packs.pull({ reference: `${NO_REGISTRY}/conf/none:1`, tag: 'conf-pulled' }),
      rejectsWith('registry_unreachable'),
    );
    await assert.rejects(
      packs.push(s.snapshot, `${NO_REGISTRY}/conf/pushed:1`),
      rejectsWith('registry_unreachable'),
    );
  });

  it('the host reports its QEMU, accelerator, sandbox counts, usage, doctor and bench results', async (s) => {
    const { host } = s.services;
    assert.equal(typeof (await host.qemuVersion()), 'string');
    assert.ok(['kvm', 'tcg'].includes(await host.accel()));
    for (const n of Object.values(host.sandboxCounts())) assert.equal(typeof n, 'number');
    assert.ok(Array.isArray(await host.sandboxUsage()));
    if (host.doctor) {
      const report = await host.doctor();
      assert.deepEqual([typeof report.ok, Array.isArray(report.checks)], ['boolean', true]);
    }
    if (host.benchResults) assert.ok(Array.isArray(await host.benchResults()));
  });
}
