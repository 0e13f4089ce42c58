/**
 * The E2B listener over fake services for the API tier (inject, no sockets): its app with
 * one API key, reset before each test, the seed sandbox's E2B id and envd access token, and
 * requests to the control plane, to envd and as Connect-RPC JSON.
 */
import { beforeEach } from 'node:test';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { buildE2bApp } from '../../src/api/e2b/app.js';
import { FakeServices, SEED } from './fake-services.js';

export const KEY = 'e2b-api-key-0123456789abcdef';
/** The seed sandbox as E2B names it (no hyphen). */
export const ID = SEED.sandbox.replace('-', '');

export interface E2bOverFakes {
  fake: FakeServices;
  /** The listener (built at the first test). */
  readonly app: FastifyInstance;
  /** The seed sandbox's envd access token. */
  readonly token: string;
  control(opts: InjectOptions): Promise<LightMyRequestResponse>;
  envd(opts: InjectOptions): Promise<LightMyRequestResponse>;
  rpc(path: string, message: unknown): Promise<LightMyRequestResponse>;
  /** The arguments of each call of a fake service's method, in order. */
  callsOf(service: string, method: string): unknown[][];
}

/** Call at the top of a test file: the app and fakes, reset before each of its tests. */
export function e2bOverFakes(): E2bOverFakes {
  const fake = new FakeServices();
  let app: FastifyInstance | undefined;
  let token = '';
  const listener = () => app as FastifyInstance;
  const control = (opts: InjectOptions) =>
    listener().inject({ ...opts, headers: { 'x-api-key': KEY, ...opts.headers } });
  const envd = (opts: InjectOptions) =>
    listener().inject({
      ...opts,
      headers: { 'e2b-sandbox-id': ID, 'x-access-token': token, ...opts.headers },
    });
  beforeEach(async () => {
    fake.reset();
    app ??= await buildE2bApp(fake.services, { tokens: new Map([[KEY, 'e2b']]) });
    const created = await control({ method: 'POST', url: `/sandboxes/${ID}/connect`, payload: {} });
    token = created.json().envdAccessToken;
    fake.reset();
  });
  return {
    fake,
    get app() {
      return listener();
    },
    get token() {
      return token;
    },
    control,
    envd,
    rpc: (path, message) =>
      envd({ method: 'POST', url: `/${path}`, payload: message as Record<string, unknown> }),
    callsOf: (service, method) =>
      fake.calls.filter((c) => c.service === service && c.method === method).map((c) => c.args),
  };
}
