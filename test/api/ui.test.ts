/**
 * The web UI's server side over fake services: /ui pages are public with a strict CSP and
 * serve only listed files; GET /v1/events streams the store's row changes as server-sent
 * events; a WebSocket's token may come as the `forkd.bearer.` subprotocol.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { wsBearer } from '../../src/api/auth.js';
import { sseFrame } from '../../src/api/routes/events.js';
import { changeEvent } from '../../src/services/events.js';
import { FakeServices } from '../helpers/fake-services.js';

const TOKEN = 'tok-ui-0123456789';
const fake = new FakeServices();
let app: FastifyInstance;

before(async () => {
  app = await buildApp(fake.services, { requireAuth: true, tokens: new Map([[TOKEN, 'ui']]) });
});
after(() => app.close());

test('/ui is public, with a CSP; its libraries come from the daemon', async () => {
  const page = await app.inject('/ui');
  assert.equal(page.statusCode, 200);
  assert.match(page.headers['content-type'] as string, /text\/html/);
  assert.match(page.headers['content-security-policy'] as string, /script-src 'self'/);
  for (const f of ['app.js', 'vendor/cytoscape.mjs', 'vendor/xterm.mjs', 'vendor/xterm.css']) {
    assert.equal((await app.inject(`/ui/${f}`)).statusCode, 200, f);
  }
  for (const bad of ['../package.json', '..%2fpackage.json', 'vendor/../../x', 'nope.js']) {
    // Unlisted (404) or, normalized outside /ui, a route that needs a token (401).
    const res = await app.inject(`/ui/${bad}`);
    assert.ok([401, 404].includes(res.statusCode), `${bad}: ${res.statusCode}`);
    assert.doesNotMatch(res.body, /"version"/, bad);
  }
  assert.equal((await app.inject('/v1/events?timeout_s=0')).statusCode, 401, 'data needs a token');
});

test('GET /v1/events streams row changes as server-sent events', async () => {
  setTimeout(() => {
    fake.changes.emit({
      table: 'sandboxes',
      key: 'sbx-00000000000b',
      op: 'insert',
      state: 'starting',
    });
    fake.changes.emit({ table: 'snapshots', key: 'base', op: 'delete' });
  }, 100);
  const res = await app.inject({
    url: '/v1/events?timeout_s=1',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  assert.equal(res.statusCode, 200);
  assert.match(res.headers['content-type'] as string, /text\/event-stream/);
  const events = res.body
    .split('\n\n')
    .filter((b) => b.startsWith('event: change'))
    .map((b) => JSON.parse(b.split('data: ')[1] as string) as Record<string, unknown>);
  assert.deepEqual(
    events.map((e) => [e.kind, e.id, e.op, e.state]),
    [
      ['sandbox', 'sbx-00000000000b', 'created', 'starting'],
      ['snapshot', 'base', 'removed', null],
    ],
  );
});

test('an event frame and the WebSocket subprotocol token', () => {
  const e = changeEvent(
    { table: 'sandboxes', key: 'x', op: 'update', state: 'running' },
    new Date(0),
  );
  assert.equal(sseFrame(e), `event: change\ndata: ${JSON.stringify(e)}\n\n`);
  const offer = `forkd, forkd.bearer.${Buffer.from(TOKEN).toString('base64url')}`;
  assert.equal(wsBearer(offer), TOKEN);
  assert.equal(wsBearer('forkd'), undefined);
});
