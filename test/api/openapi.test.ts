/**
 * The OpenAPI document: the checked-in docs/openapi.json is exactly what the app generates
 * (regenerate with `npm run build && npm run openapi`); every route of the app is in it and
 * every operation in it is a route; the route table of the tests covers them all; every
 * reference resolves; /v1/openapi.json serves the same document.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { buildApp, routesOf } from '../../src/api/app.js';
import { renderOpenApi } from '../../src/api/openapi.js';
import { FakeServices } from '../helpers/fake-services.js';
import { validRequests } from '../helpers/route-requests.js';

interface Doc {
  openapi: string;
  paths: Record<string, Record<string, { parameters?: { in: string; name: string }[] }>>;
  components: { schemas: Record<string, unknown> };
}

let app: FastifyInstance;
let doc: Doc;

before(async () => {
  app = await buildApp(new FakeServices().services, { requireAuth: false });
  doc = JSON.parse(await renderOpenApi(app)) as Doc;
});
after(() => app.close());

/** `/v1/sandboxes/:id` → `/v1/sandboxes/{id}`. */
const openapiPath = (url: string) => url.replace(/:(\w+)/g, '{$1}').replace(/\/\*$/, '/{*}');

const key = (method: string, url: string) => `${method.toUpperCase()} ${openapiPath(url)}`;

test('docs/openapi.json is what the app generates (no drift)', async () => {
  const checkedIn = readFileSync('docs/openapi.json', 'utf8');
  assert.ok(
    checkedIn === (await renderOpenApi(app)),
    'docs/openapi.json is out of date: run `npm run build && npm run openapi`',
  );
});

test('every route is documented and every documented operation is a route', () => {
  const routes = routesOf(app)
    .map((r) => key(r.method, r.url))
    .sort();
  const documented = Object.entries(doc.paths)
    .flatMap(([path, ops]) => Object.keys(ops).map((m) => key(m, path)))
    .sort();
  assert.deepEqual(routes, documented);
  assert.equal(new Set(routes).size, routes.length);
});

test('the route table the tests walk covers every route', () => {
  const table = validRequests()
    .map((r) => key(r.method, r.route))
    .sort();
  const routes = routesOf(app)
    .map((r) => key(r.method, r.url))
    .sort();
  assert.deepEqual(table, routes);
});

test('the document is OpenAPI 3 with resolvable references and declared path parameters', () => {
  assert.equal(doc.openapi, '3.0.3');
  const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"([^"]+)"/g)].map(([, r]) => r!);
  assert.ok(refs.length > 0);
  for (const ref of refs) {
    const name = ref.replace('#/components/schemas/', '');
    assert.ok(ref.startsWith('#/components/schemas/') && name in doc.components.schemas, ref);
  }
  for (const [path, ops] of Object.entries(doc.paths)) {
    const params = [...path.matchAll(/\{(\w+)\}/g)].map(([, p]) => p);
    for (const [method, op] of Object.entries(ops)) {
      const declared = (op.parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name);
      assert.deepEqual(declared.sort(), params.sort(), `${method} ${path}`);
    }
  }
});

test('GET /v1/openapi.json serves the document', async () => {
  const res = await app.inject('/v1/openapi.json');
  assert.equal(res.statusCode, 200);
  assert.deepEqual(res.json(), JSON.parse(JSON.stringify(app.swagger())));
});
