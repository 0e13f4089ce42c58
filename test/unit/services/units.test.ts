/**
 * Service parts without VMs: concurrency gates, expiry timers, the exec event queue,
 * strict base64, QEMU version parsing.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { isForkdError } from '../../../src/errors.js';
import { Gate } from '../../../src/services/sandboxes/gate.js';
import { ExpiryTimers } from '../../../src/services/sandboxes/expiry.js';
import { EventQueue } from '../../../src/util/queue.js';
import { decodeBase64, newExecId } from '../../../src/services/sandboxes/exec.js';
import { parseQemuVersion } from '../../../src/services/host.js';

test('a gate refuses past its limit with capacity and retry_after_s, and frees on release', () => {
  const gate = new Gate('things', 2, 3);
  const a = gate.enter();
  gate.enter();
  assert.throws(
    () => gate.enter(),
    (e) => isForkdError(e, 'capacity') && e.details?.retry_after_s === 3,
  );
  a();
  a(); // releasing twice frees one slot only
  assert.equal(gate.count, 1);
  gate.enter();
  assert.equal(gate.count, 2);
});

test('expiry timers fire at the deadline, re-arm on a new one, and can be cleared', async () => {
  const fired: string[] = [];
  const timers = new ExpiryTimers((id) => fired.push(id));
  timers.arm('a', new Date(Date.now() + 50).toISOString());
  timers.arm('b', new Date(Date.now() + 50).toISOString());
  timers.arm('b', new Date(Date.now() + 10_000).toISOString()); // extended
  timers.arm('c', new Date(Date.now() - 1000).toISOString()); // already past: fires at once
  timers.arm('d', new Date(Date.now() + 50).toISOString());
  timers.clear('d');
  await sleep(150);
  assert.deepEqual(fired.sort(), ['a', 'c']);
  timers.clearAll();
});

test('an event queue delivers in order, ends, and reports a reader that leaves', async () => {
  const q = new EventQueue<number>();
  q.push(1);
  setTimeout(() => (q.push(2), q.close()), 10);
  const got: number[] = [];
  for await (const n of q) got.push(n);
  assert.deepEqual(got, [1, 2]);

  let abandoned = false;
  const q2 = new EventQueue<number>(() => (abandoned = true));
  q2.push(1);
  for await (const n of q2) if (n === 1) break;
  assert.equal(abandoned, true);

  const q3 = new EventQueue<number>();
  q3.close(new Error('boom'));
  await assert.rejects(async () => {
    for await (const _ of q3) void _;
  }, /boom/);
});

test('stdin must be strict base64', () => {
  assert.deepEqual(decodeBase64('stdin', 'aGk='), Buffer.from('hi'));
  assert.deepEqual(decodeBase64('stdin', ''), Buffer.alloc(0));
  for (const bad of ['a', 'aGk', 'a!b=', 'aGk=\n']) {
    assert.throws(
      () => decodeBase64('stdin', bad),
      (e) => isForkdError(e, 'bad_request'),
      bad,
    );
  }
  assert.match(newExecId(), /^ex-[0-9a-f]{12}$/);
});

test('the QEMU version is read from --version output', () => {
  assert.equal(
    parseQemuVersion('QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright'),
    '7.2.22',
  );
  assert.equal(parseQemuVersion('something else\n'), 'something else');
});
