/**
 * The daemon's own lookups behind the name proxy's check (a name must resolve to where the
 * connection goes): asked of the upstream once per TTL, empty for a name it does not know
 * and for a resolver that does not answer. A DNS server on loopback stands in for it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ResolvedNames } from '../../../src/services/network/resolved.js';
import { serveDns } from '../../helpers/dns-server.js';

test('a name resolves through the upstream, once per TTL; unknown names and dead resolvers give nothing', async () => {
  const dns = await serveDns({ 'allowed.test': '198.51.100.2' }, { host: '127.0.0.1', port: 0 });
  try {
    const names = new ResolvedNames(() => ({ host: '127.0.0.1', port: dns.port }));
    assert.deepEqual([...(await names.addresses('allowed.test'))], ['198.51.100.2']);
    assert.deepEqual([...(await names.addresses('allowed.test'))], ['198.51.100.2']);
    assert.deepEqual(dns.asked, ['allowed.test'], 'the second connection used the kept answer');
    assert.equal((await names.addresses('other.test')).size, 0);
    const none = new ResolvedNames(() => undefined);
    assert.equal((await none.addresses('allowed.test')).size, 0);
  } finally {
    await dns.close();
  }
});
