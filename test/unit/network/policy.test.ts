/**
 * The egress policy without I/O: which entries parse (and how a bad one is named), how an
 * override merges over an inherited policy, what the DNS proxy and the name proxy do with
 * a name, and the rules a policy becomes (the nftables script included).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isForkdError } from '../../../src/errors.js';
import { policyScript } from '../../../src/drivers/net/nft.js';
import { netnsOf } from '../../../src/drivers/net/netns.js';
import {
  judgeConnection,
  decideName,
  egressRules,
  mergeEgress,
  type Egress,
  NO_EGRESS,
  OPEN_EGRESS,
  parseEntry,
} from '../../../src/services/network/policy.js';

test('entries: CIDR, IP, host:port, hostname and *.domain parse', () => {
  assert.deepEqual(parseEntry('allow_out', '10.1.0.0/16'), {
    kind: 'net',
    net: '10.1.0.0/16',
    port: undefined,
  });
  assert.deepEqual(parseEntry('allow_out', '1.2.3.4:443'), {
    kind: 'net',
    net: '1.2.3.4',
    port: 443,
  });
  assert.deepEqual(parseEntry('allow_out', 'PyPI.org'), {
    kind: 'host',
    pattern: 'pypi.org',
    port: undefined,
  });
  assert.deepEqual(parseEntry('deny_out', '*.example.com:80'), {
    kind: 'host',
    pattern: '*.example.com',
    port: 80,
  });
});

test('a bad entry is refused with its field and value named', () => {
  for (const bad of [
    '1.2.3.4/33',
    'host:0',
    'host:70000',
    '::1',
    '2001:db8::/32',
    'a b',
    '-x.com',
  ]) {
    assert.throws(
      () => mergeEgress(OPEN_EGRESS, { allow_out: [bad] }),
      (e: unknown) => isForkdError(e) && e.code === 'bad_request' && e.message.includes(bad),
      bad,
    );
  }
});

test('an override replaces the fields it gives and inherits the rest; none wins', () => {
  const parent = mergeEgress(OPEN_EGRESS, { allow_out: ['10.0.0.0/8'] });
  assert.deepEqual(mergeEgress(parent, { deny_out: ['evil.test'] }), {
    none: false,
    allow_internet: true,
    allow_out: ['10.0.0.0/8'],
    deny_out: ['evil.test'],
  });
  assert.deepEqual(mergeEgress(parent, 'none'), NO_EGRESS);
  assert.equal(mergeEgress(NO_EGRESS, { allow_out: ['a.test'] }).allow_internet, false);
  assert.equal(mergeEgress(parent, undefined), parent);
});

test('DNS: a denied name is refused, an allowed one learned, unlisted ones follow allow_internet', () => {
  const p = mergeEgress(OPEN_EGRESS, {
    allow_internet: false,
    allow_out: ['*.pypi.test', 'api.test:443'],
    deny_out: ['bad.pypi.test'],
  });
  assert.deepEqual(decideName(p, 'files.pypi.test'), {
    refuse: false,
    allow: [undefined],
    deny: [],
  });
  assert.deepEqual(decideName(p, 'api.test'), { refuse: false, allow: [443], deny: [] });
  assert.equal(decideName(p, 'bad.pypi.test').refuse, true);
  assert.equal(decideName(p, 'other.test').refuse, true);
  assert.equal(decideName(OPEN_EGRESS, 'other.test').refuse, false);
  assert.equal(decideName(NO_EGRESS, 'a.test').refuse, true);
});

test('rules: CIDRs and host:port entries go to their sets, hostnames wait for DNS', () => {
  const p = mergeEgress(OPEN_EGRESS, { allow_out: ['10.0.0.0/8', '1.2.3.4:80', 'a.test'] });
  const r = egressRules(p, ['192.0.2.2']);
  assert.deepEqual(r.allow, { nets: ['10.0.0.0/8'], services: [{ net: '1.2.3.4', port: 80 }] });
  assert.deepEqual(r.hostAddresses, ['192.0.2.2']);
});

test('named connections (SNI / Host): judged like DNS, with ports; allowed names must resolve there', () => {
  const p = mergeEgress(OPEN_EGRESS, {
    allow_internet: false,
    allow_out: ['a.test', 'api.test:443'],
    deny_out: ['bad.a.test'],
  });
  const judge = (e: Egress, name: string | undefined, port: number) =>
    judgeConnection(e, { name }, port);
  // Allowed only by a hostname entry: passed on condition that the name resolves there.
  assert.deepEqual(judge(p, 'a.test', 443), { pass: true, verify: 'a.test' });
  assert.deepEqual(judge(p, 'api.test', 443), { pass: true, verify: 'api.test' });
  assert.deepEqual(judge(p, 'api.test', 80), { pass: false, reason: 'name_not_allowed' });
  assert.deepEqual(judge(p, 'b.test', 443), { pass: false, reason: 'name_not_allowed' });
  assert.deepEqual(judge(p, 'bad.a.test', 443), { pass: false, reason: 'name_denied' });
  assert.deepEqual(judge(p, undefined, 443), { pass: false, reason: 'no_name' });
  const open = mergeEgress(OPEN_EGRESS, { deny_out: ['b.test', 'c.test:80'] });
  assert.deepEqual(judge(open, 'b.test', 443), { pass: false, reason: 'name_denied' });
  assert.deepEqual(judge(open, 'c.test', 443), { pass: true });
  assert.deepEqual(judge(open, 'c.test', 80), { pass: false, reason: 'name_denied' });
  assert.deepEqual(judge(open, undefined, 443), { pass: true });
  assert.deepEqual(judge(NO_EGRESS, 'a.test', 443), { pass: false, reason: 'egress_none' });
  // What the proxy cannot read is refused even where the internet is open.
  for (const unreadable of ['ech', 'h2c', 'hello'] as const) {
    assert.deepEqual(judgeConnection(open, { name: 'c.test', unreadable }, 443), {
      pass: false,
      reason: unreadable,
    });
  }
});

test('steering: only a policy naming hostnames sends web ports (and named ones) to the proxy', () => {
  const ns = netnsOf(3);
  assert.deepEqual(egressRules(OPEN_EGRESS, []).steerPorts, []);
  assert.deepEqual(
    egressRules(mergeEgress(OPEN_EGRESS, { allow_out: ['10.0.0.0/8'] }), []).steerPorts,
    [],
  );
  const named = egressRules(
    mergeEgress(OPEN_EGRESS, { allow_out: ['a.test:8443'], deny_out: ['192.0.2.0/24'] }),
    [],
  );
  assert.deepEqual(named.steerPorts, [80, 443, 8443]);
  const script = policyScript(ns, named);
  assert.match(script, /tcp dport != \{ 80, 443, 8443 \} return/);
  // Deny lists, allow lists, private ranges and the always-denied stay with the filter.
  const steer = script.slice(script.indexOf('chain steer'), script.indexOf('chain deny'));
  assert.ok(
    steer.indexOf('@deny_net return') < steer.indexOf('meta l4proto tcp dnat ip to 10.231.0.13:53'),
  );
  assert.match(steer, /ip daddr \{ 0\.0\.0\.0\/8, .*10\.0\.0\.0\/8.* \} return/);
  // UDP on those ports (QUIC) is refused unless its address is listed.
  const out = script.slice(script.indexOf('chain out'));
  assert.match(out, /udp dport \{ 80, 443, 8443 \} ip daddr @allow_net accept/);
  assert.match(out, /udp dport \{ 80, 443, 8443 \} jump unread/);
  assert.ok(out.indexOf('jump unread') < out.indexOf('@allow_dns accept'));
  assert.deepEqual(egressRules(NO_EGRESS, []).steerPorts, []);
  assert.doesNotMatch(
    policyScript(ns, egressRules(OPEN_EGRESS, [])),
    /meta l4proto tcp dnat ip to 10\.231\.0\.13:53/,
  );
});
