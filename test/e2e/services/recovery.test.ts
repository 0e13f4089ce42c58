/**
 * Crash recovery at the service level: a service that vanishes without stopping its
 * sandboxes (what a SIGKILLed daemon leaves), one QEMU killed meanwhile, a stray dir and
 * a sandbox cut off mid-boot; a new service on the same store must re-adopt the live ones,
 * bury the dead one and sweep the rest. (test/daemon/ does the same with real processes.)
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { bootSandbox } from '../../../src/services/sandboxes/sandbox.js';
import { SandboxManager } from '../../../src/services/sandboxes/service.js';
import { Store } from '../../../src/store/db.js';
import { assertNoLeftovers, makeTestHome, qemusUnder, type TestHome } from '../../helpers/home.js';
import { wireVmm } from '../../../src/services/vmm-driver.js';

wireVmm(); // sandboxes booted here without buildServices()

let home: TestHome;
let store: Store;
let survivor: SandboxManager | undefined;

before(async () => {
  home = await makeTestHome();
  store = Store.open(home.paths.db);
});

after(async () => {
  try {
    await survivor?.killAll();
    store.close();
    await assertNoLeftovers(home);
  } finally {
    await home.cleanup();
  }
});

const caller = { principal: 'test' };
const out = (b64: string) => Buffer.from(b64, 'base64').toString('utf8');

test('a new service re-adopts live sandboxes, buries a killed one, sweeps strays', async () => {
  const first = new SandboxManager({ paths: home.paths, store });
  await first.start();
  const a = await first.create({ timeout_s: 600, labels: { n: 'a' } }, caller);
  const b = await first.create({ labels: { n: 'b' } }, caller);
  const c = await first.create({ labels: { n: 'c' } }, caller);
  await first.exec(a.id, { argv: ['sh', '-c', 'echo before > /tmp/mark'] });
  first.detach(); // the daemon is gone; its QEMUs are not

  process.kill(c.pid as number, 'SIGKILL');
  // A boot cut off after QEMU started: a `starting` row with no pid recorded yet.
  const midBoot = await bootSandbox(home.paths, { image: 'busybox' });
  midBoot.agent.close();
  midBoot.vm.detach();
  store.sandboxes.insert({
    ...{ id: midBoot.id, state: 'starting', image: 'busybox', snapshot: null, parent: null },
    ...{ memory_mib: 256, cpus: 1, labels: {}, env: { LATE: 'yes' } },
    ...{ created_at: new Date().toISOString(), expires_at: null, pid: null },
    ...{ dir: midBoot.dir, reason: null },
  });
  // A directory with no row, whose maker is gone.
  const stray = join(home.paths.sandboxes, 'sbx-000000000000');
  await mkdir(stray);
  await writeFile(join(stray, 'owner.pid'), '999999999\n');
  await sleep(200);

  survivor = new SandboxManager({ paths: home.paths, store, pollMs: 200 });
  const report = await survivor.start();
  assert.deepEqual(report.adopted.sort(), [a.id, b.id, midBoot.id].sort());
  assert.deepEqual(report.dead, [c.id]);
  assert.deepEqual(report.swept, ['sbx-000000000000']);

  for (const id of [a.id, b.id, midBoot.id]) {
    const sb = await survivor.get(id);
    assert.equal(sb.state, 'running', id);
    const r = await survivor.exec(id, { argv: ['echo', 'alive'] });
    assert.equal(out(r.stdout), 'alive\n', id);
  }
  const mark = await survivor.exec(a.id, { argv: ['cat', '/tmp/mark'] });
  assert.equal(out(mark.stdout), 'before\n', 'the guest kept its state');
  assert.equal((await survivor.get(a.id)).expires_at, a.expires_at, 'timeout kept');
  const late = await survivor.exec(midBoot.id, { argv: ['sh', '-c', 'echo $LATE'] });
  assert.equal(out(late.stdout), 'yes\n', 'the cut-off boot was finished (env pushed)');

  const dead = await survivor.get(c.id);
  assert.equal(dead.state, 'dead');
  assert.match(dead.reason ?? '', /QEMU exited while the daemon was down/);
  assert.equal(existsSync(join(home.paths.sandboxes, c.id)), false);
  assert.equal(existsSync(stray), false);

  // An adopted QEMU is watched without being our child: its death is noticed.
  process.kill(b.pid as number, 'SIGKILL');
  const deadline = Date.now() + 10_000;
  while ((await survivor.get(b.id)).state !== 'dead' && Date.now() < deadline) await sleep(100);
  assert.equal((await survivor.get(b.id)).state, 'dead');

  await survivor.kill(a.id);
  await survivor.kill(midBoot.id);
  assert.deepEqual(await qemusUnder(home.dir), []);
  await assertNoLeftovers(home);
});
