/**
 * What a create or fork into a caller's network namespace must hold
 * (services/sandboxes/caller-netns.ts): a NIC, a path that is a namespace, ports only with
 * one. Each refusal is bad_request naming the field, before anything starts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ForkdError } from '../../../src/errors.js';
import { checkCallerNetns } from '../../../src/services/sandboxes/caller-netns.js';

/** This process's own network namespace: a path that is one. */
const OWN = '/proc/self/ns/net';
const NO_NIC = 'no NIC here';

/** `check` rejects with bad_request on `field`, its message matching `message`. */
async function refused(check: Promise<void>, field: string, message: RegExp): Promise<void> {
  await assert.rejects(check, (e: unknown) => {
    assert.ok(e instanceof ForkdError);
    assert.equal(e.code, 'bad_request');
    assert.equal((e.details as { field?: string }).field, field);
    assert.match(e.message, message);
    return true;
  });
}

test('a namespace path with a NIC passes; nothing asked passes', async () => {
  await checkCallerNetns({ netns: OWN, forward_ports: [8080] }, 'nat', NO_NIC);
  await checkCallerNetns({}, 'none', NO_NIC);
});

test('a path that does not exist, or is no namespace, is refused naming it', async () => {
  await refused(
    checkCallerNetns({ netns: '/run/netns/forkd-test-none' }, 'nat', NO_NIC),
    'netns',
    /^no network namespace at \/run\/netns\/forkd-test-none: give the path of one/,
  );
  await refused(
    checkCallerNetns({ netns: '/tmp' }, 'nat', NO_NIC),
    'netns',
    /^\/tmp is not a network namespace/,
  );
});

test('a sandbox without a NIC, and ports without a namespace, are refused', async () => {
  await refused(checkCallerNetns({ netns: OWN }, 'none', NO_NIC), 'netns', /^no NIC here$/);
  await refused(
    checkCallerNetns({ forward_ports: [80] }, 'nat', NO_NIC),
    'forward_ports',
    /forward_ports goes with netns/,
  );
});
