/**
 * How the shim tells a pod's tasks apart (pod.ts): CRI's annotations make a sandbox
 * container the pod's VM and an app container a process in it; a task without them (ctr) is
 * a sandbox of its own.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PodSandbox, roleOf } from '../../../src/shim/pod.js';

const TYPE = 'io.kubernetes.cri.container-type';
const POD = 'io.kubernetes.cri.sandbox-id';

test("a pod's sandbox container makes the pod; its app containers join it", () => {
  assert.deepEqual(roleOf({ [TYPE]: 'sandbox', [POD]: 'p1' }, 'p1'), { kind: 'pod', pod: 'p1' });
  assert.deepEqual(roleOf({ [TYPE]: 'container', [POD]: 'p1' }, 'c1'), {
    kind: 'container',
    pod: 'p1',
  });
});

test('a task without CRI annotations (ctr) is a task of its own', () => {
  assert.deepEqual(roleOf({}, 't1'), { kind: 'task' });
  assert.deepEqual(roleOf({ 'forkd.dev/snapshot': 'warm' }, 't1'), { kind: 'task' });
  // An app container that does not name its pod cannot join one.
  assert.deepEqual(roleOf({ [TYPE]: 'container' }, 'c1'), { kind: 'task' });
});

/** A fake VM: its id, whether it was killed, its pid. */
function fakeVm(id: string) {
  const vm = {
    id,
    killed: false,
    kill: async () => void (vm.killed = true),
    refresh: async () => ({ pid: 4242 }) as never,
  };
  return vm;
}

test("a pod without a VM: its sandbox container's process stands in (pid 0) and a signal ends it", async () => {
  const pod = new PodSandbox<ReturnType<typeof fakeVm>>(undefined);
  const hold = await pod.hold();
  assert.equal(hold.pid, 0);
  await hold.signal('SIGKILL');
  assert.deepEqual(await hold.wait(), { exitCode: null, signal: 'SIGKILL' });
  // Stopped: no container can make its VM any more.
  await assert.rejects(
    pod.get(async () => fakeVm('late')),
    /stopped before its VM was made/,
  );
});

test('the first containers of a pod make one VM between them; later ones find it', async () => {
  const pod = new PodSandbox<ReturnType<typeof fakeVm>>(undefined);
  let made = 0;
  const make = async () => {
    made++;
    await new Promise((r) => setTimeout(r, 10));
    return fakeVm('vm1');
  };
  const [a, b] = await Promise.all([pod.get(make), pod.get(make)]);
  assert.equal(made, 1);
  assert.equal(a, b);
  assert.equal(await pod.get(make), a);
  assert.equal(made, 1);
  assert.equal((await pod.hold()).pid, 4242, "once made, the pod's process is the VMM");
});

test('a VM whose making failed is made again by the next container', async () => {
  const pod = new PodSandbox<ReturnType<typeof fakeVm>>(undefined);
  await assert.rejects(
    pod.get(async () => {
      throw new Error('import failed');
    }),
    /import failed/,
  );
  assert.equal((await pod.get(async () => fakeVm('vm2'))).id, 'vm2');
});

test('a pod stopped while its VM is made: the VM is killed once made, and the container refused', async () => {
  const pod = new PodSandbox<ReturnType<typeof fakeVm>>(undefined);
  const vm = fakeVm('vm3');
  let finish!: () => void;
  const making = pod.get(() => new Promise((r) => (finish = () => r(vm))));
  const hold = await pod.hold();
  const signalled = hold.signal('SIGTERM');
  finish();
  await assert.rejects(making, /stopped before its VM was made/);
  await signalled;
  assert.equal(vm.killed, true);
  assert.equal(pod.vm, undefined);
});
