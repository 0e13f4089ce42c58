/**
 * KeyedLock: holders of one key take turns in the order they asked; other keys do not wait;
 * a release given twice frees the key once.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { KeyedLock } from '../../src/util/keyed-lock.js';

test('one holder per key, in the order asked; other keys run alongside', async () => {
  const lock = new KeyedLock();
  const log: string[] = [];
  const hold = async (key: string, name: string, ms: number) => {
    const release = await lock.acquire(key);
    log.push(`${name} in`);
    await sleep(ms);
    log.push(`${name} out`);
    release();
    release(); // idempotent: must not let a third holder in early
  };
  await Promise.all([
    hold('a', 'a1', 30),
    hold('a', 'a2', 5),
    hold('a', 'a3', 1),
    hold('b', 'b1', 1),
  ]);
  assert.deepEqual(
    log.filter((l) => l.startsWith('a')),
    ['a1 in', 'a1 out', 'a2 in', 'a2 out', 'a3 in', 'a3 out'],
  );
  assert.ok(log.indexOf('b1 out') < log.indexOf('a1 out'), 'b waited for a');
  assert.equal(lock.held('a'), false, 'the key is forgotten once free');
});
