/**
 * The halted tier (docs/idle.md: only the disk kept, the wake a cold boot) with a real
 * daemon: through forkd's SDK (a file on its disk is kept, the guest's boot_id changes,
 * the id, labels and env stay, a halted sandbox holds no QEMU, a pause to another tier is
 * refused until it is resumed, and once killed nothing of it is left: no QEMU, no
 * directory, no cgroup), and through the unmodified `e2b` SDK against the E2B listener
 * (`pause({ keepMemory: false })`: isRunning false until connect() boots it under the same
 * id with its file and a new boot_id; no deadline while it is paused, connect()'s timeout
 * after). The template is busybox with a `user` account.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from '@forkd/sdk';
import { loadE2b, type E2bModule } from '../../helpers/e2b-sdk.js';
import { assertNoLeftovers, qemusUnder } from '../../helpers/home.js';
import { makeUserTemplate, startE2bListener } from '../../helpers/e2b-listener.js';

const TAG = 'e2b-halt';
const BOOT_ID = 'cat /proc/sys/kernel/random/boot_id';

/** The daemon with its E2B listener and the `e2b` package, for the whole file. */
const ctx = {} as { e2b: E2bModule; listener?: Awaited<ReturnType<typeof startE2bListener>> };

before(async () => {
  ctx.e2b = await loadE2b('e2b');
  ctx.listener = await startE2bListener('e2b-halt-test-token-0123456789abcd');
  await makeUserTemplate(ctx.listener.forkd, TAG);
});

after(() => ctx.listener?.stop());

test('forkd: a halted sandbox keeps its disk, id, labels and env; its wake is a cold boot; killed, nothing is left', async () => {
  const { forkd, home } = ctx.listener!;
  const sbx = await Sandbox.create({
    ...forkd,
    snapshot: TAG,
    labels: { run: 'halt' },
    env: { FROM_CREATE: 'kept' },
    timeoutMs: 600_000,
  });
  try {
    await sbx.files.write('/home/user/kept.txt', 'on the disk');
    const before = (await sbx.commands.run(BOOT_ID)).stdout.trim();
    await sbx.commands.run('sleep 600 >/dev/null 2>&1 &');

    const halted = await sbx.pause({ tier: 'halted' });
    assert.deepEqual([halted.state, halted.tier], ['running', 'halted']);
    assert.deepEqual(await qemusUnder(home.dir), [], 'a halted sandbox has no QEMU');
    await assert.rejects(sbx.pause({ tier: 'hibernated' }), /halted.*resume it first/);

    // Any request wakes it, as it wakes a paused or hibernated one: here a command.
    const after = await sbx.commands.run(
      `${BOOT_ID}; cat /home/user/kept.txt; echo " $FROM_CREATE"`,
    );
    const [bootAfter, rest] = after.stdout.split('\n');
    assert.notEqual(bootAfter!.trim(), before, 'a new boot_id: the guest booted cold');
    assert.equal(rest, 'on the disk kept');
    const info = await sbx.refresh();
    assert.deepEqual([info.id, info.tier, info.labels.run], [sbx.id, 'running', 'halt']);
    const sleepers = await sbx.commands.run('ps | grep -c "[s]leep 600" || true');
    assert.equal(sleepers.stdout.trim(), '0', 'its processes did not survive the halt');

    // Halted again, then killed while halted: nothing of it is left.
    await sbx.pause({ tier: 'halted' });
  } finally {
    await sbx.kill().catch(() => undefined);
  }
  const left = await Sandbox.list(forkd);
  assert.deepEqual(
    left.filter((s) => s.state === 'running'),
    [],
  );
  await assertNoLeftovers(home);
});

test('e2b: pause({ keepMemory: false }) reboots on connect() under the same id and keeps the filesystem', async () => {
  const sbx = await ctx.e2b.Sandbox.create(TAG, { timeoutMs: 300_000 });
  try {
    const file = '/home/user/fs_only.txt';
    await sbx.files.write(file, 'filesystem only');
    const before = (await sbx.commands.run(BOOT_ID)).stdout.trim();
    assert.equal(await sbx.pause?.({ keepMemory: false }), true);
    assert.equal(await sbx.isRunning(), false);
    assert.equal((await sbx.getInfo()).state, 'paused');
    const forkdView = await Sandbox.connect(`sbx-${sbx.sandboxId.slice(3)}`, ctx.listener!.forkd);
    assert.equal(forkdView.info.tier, 'halted');
    assert.equal(forkdView.info.expiresAt, null, 'paused by E2B, it does not expire');

    const resumed = await sbx.connect();
    const expires = Date.parse((await forkdView.refresh()).expiresAt ?? 'none');
    assert.ok(expires <= Date.now() + 300_000, 'connect() gave it its default 300 s');
    assert.equal(resumed.sandboxId, sbx.sandboxId);
    assert.equal(await resumed.isRunning(), true);
    assert.equal(await resumed.files.exists(file), true);
    assert.equal(await resumed.files.read(file), 'filesystem only');
    const after = (await resumed.commands.run(BOOT_ID)).stdout.trim();
    assert.notEqual(after, before);
  } finally {
    await sbx.kill().catch(() => false);
  }
});
