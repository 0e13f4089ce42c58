/**
 * The catalog and the SDK's error classes stay in step: every code has a class exported
 * under its name, extending ForkdError with the catalog's status; error bodies decode to
 * those classes; codes the SDK does not know degrade to a generic one without losing data.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as sdk from '@forkd/sdk';
import { CapacityError, ERROR_CATALOG, ForkdError, errorFromResponse } from '@forkd/sdk';

const className = (code: string) =>
  code.replace(/(^|_)([a-z])/g, (_m, _sep: string, c: string) => c.toUpperCase()) + 'Error';

test('every catalog code has its class, exported by name', () => {
  for (const [code, entry] of Object.entries(ERROR_CATALOG)) {
    const name = className(code);
    const cls = (sdk as Record<string, unknown>)[name] as
      (new (message: string) => ForkdError) | undefined;
    assert.ok(cls, `@forkd/sdk exports no ${name} for "${code}"`);
    const err = new cls('m');
    assert.ok(err instanceof ForkdError, name);
    assert.ok(err instanceof Error, name);
    assert.equal(err.code, code);
    assert.equal(err.status, entry.status);
    assert.equal(err.name, name);
    assert.equal(sdk.ERROR_CLASSES[code as sdk.ErrorCode], cls);
  }
});

test('an error body decodes to the class of its code, with details', () => {
  const err = errorFromResponse(404, {
    error: { code: 'sandbox_not_found', message: 'no sandbox', details: { id: 'x' } },
  });
  assert.ok(err instanceof sdk.SandboxNotFoundError);
  assert.equal(err.message, 'no sandbox');
  assert.deepEqual(err.details, { id: 'x' });
});

test('capacity carries Retry-After as retryAfterMs', () => {
  const err = errorFromResponse(
    503,
    { error: { code: 'capacity', message: 'busy' } },
    { retryAfterMs: 2000 },
  );
  assert.ok(err instanceof CapacityError);
  assert.equal(err.retryAfterMs, 2000);
});

test('an unknown code or a body that is no error body falls back by status', () => {
  const unknown = errorFromResponse(409, { error: { code: 'brand_new', message: 'hm' } });
  assert.equal(unknown.code, 'internal');
  assert.deepEqual(unknown.details, { code: 'brand_new', status: 409 });
  const proxy = errorFromResponse(404, '<html>');
  assert.ok(proxy instanceof sdk.NotFoundError);
  assert.match(proxy.message, /HTTP 404/);
  assert.ok(errorFromResponse(401, undefined) instanceof sdk.UnauthorizedError);
});

test('toJSON is the wire form', () => {
  const err = new sdk.BadRequestError('bad', { field: 'cpus' });
  assert.deepEqual(err.toJSON(), {
    error: { code: 'bad_request', message: 'bad', details: { field: 'cpus' } },
  });
});
