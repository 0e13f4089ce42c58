/**
 * What a sandbox asks against what the host enforces: each missing piece named with why,
 * a refusal that names them and the flag that accepts them, and the same list returned
 * (for the sandbox's `unenforced`) when the daemon accepts the weaker mode.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isForkdError } from '../../../src/errors.js';
import {
  checkEnforcement,
  type EnforcementAsk,
  unenforcedOf,
  type HostEnforcement,
} from '../../../src/services/enforcement.js';

const ROOT: HostEnforcement = {
  network: 'netns',
  limits: null,
  confineUser: true,
  confineOff: false,
};
const ROOTLESS: HostEnforcement = {
  network: 'user',
  limits: "cannot create cgroups under this process's (EACCES)",
  confineUser: false,
  confineOff: false,
};
const nat: EnforcementAsk = { network: 'nat', namesHosts: true };

test('a root host with nftables, cgroups and conntrack enforces everything', () => {
  assert.deepEqual(
    unenforcedOf(nat, ROOT, () => true),
    [],
  );
  assert.deepEqual(checkEnforcement({ network: 'none', namesHosts: false }, ROOT, false), []);
});

test('each missing piece is named; hostname rules need conntrack; --no-confine is not refused again', () => {
  const what = (ask = nat, host = ROOTLESS, ct = true) =>
    unenforcedOf(ask, host, () => ct).map((u) => u.what);
  assert.deepEqual(what(), ['network', 'limits', 'confinement']);
  assert.deepEqual(what({ network: 'none', namesHosts: false }), ['limits', 'confinement']);
  assert.deepEqual(what(nat, ROOT, false), ['names']);
  assert.deepEqual(what({ network: 'nat', namesHosts: false }, ROOT, false), []);
  assert.deepEqual(what(nat, { ...ROOT, confineUser: false, confineOff: true }), []);
  // No network service (tests, forkd run): nat is slirp's restrict=on, nothing gets out.
  assert.deepEqual(what(nat, { ...ROOT, network: 'off' }), []);
});

test('refused unless accepted: the error names what is missing and the flag', () => {
  assert.throws(
    () => checkEnforcement(nat, ROOTLESS, false),
    (e: unknown) =>
      isForkdError(e) &&
      e.code === 'unsupported' &&
      /network: no network namespace/.test(e.message) &&
      /limits: no cgroup limits \(cannot create cgroups/.test(e.message) &&
      /forkd daemon --accept-unenforced/.test(e.message) &&
      /--network none/.test(e.message),
  );
  assert.deepEqual(checkEnforcement(nat, ROOTLESS, true).sort(), [
    'confinement',
    'limits',
    'network',
  ]);
});
