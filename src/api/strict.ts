/**
 * Input strictness beyond what each route's schemas say. A route without a query schema
 * takes no query parameters and a route without a body schema takes no body (so a typo'd
 * parameter is an error, not silently ignored). Fastify's Ajv runs with coercion off, so a
 * JSON body's `"2"` is never taken for `2`; but a query string only carries text, so before
 * validation `true`/`false` become booleans and decimal digits integers wherever the query
 * schema asks for one. Anything else stays a string and fails validation.
 */
import type { FastifyRequest } from 'fastify';
import Type from 'typebox';
import { ForkdError } from '../errors.js';
import type { Api } from './types.js';

interface PropertySchema {
  type?: string;
}

const NO_QUERY = Type.Object({}, { additionalProperties: false });
const BOOLEANS: Record<string, boolean> = { true: true, false: false };
const INTEGER = /^-?[0-9]{1,15}$/;

function coerce(value: unknown, schema: PropertySchema | undefined): unknown {
  if (typeof value !== 'string') return value;
  if (schema?.type === 'boolean' && value in BOOLEANS) return BOOLEANS[value];
  if (schema?.type === 'integer' && INTEGER.test(value)) return Number(value);
  return value;
}

function coerceQuery(request: FastifyRequest): void {
  const schema = request.routeOptions.schema?.querystring as
    { properties?: Record<string, PropertySchema> } | undefined;
  const query = request.query as Record<string, unknown> | undefined;
  if (!schema?.properties || !query) return;
  for (const [key, value] of Object.entries(query)) {
    if (Object.hasOwn(schema.properties, key)) query[key] = coerce(value, schema.properties[key]);
  }
}

function refuseUnexpectedBody(request: FastifyRequest): void {
  const takesBody = request.routeOptions.schema?.body || request.routeOptions.config.rawBody;
  if (!takesBody && request.body !== undefined) {
    throw new ForkdError(
      'bad_request',
      `${request.method} ${request.routeOptions.url} takes no body`,
      {
        field: 'body',
        reason: 'unexpected body',
      },
    );
  }
}

/** Adds the strictness rules to every route of `app`. Call before routes are added. */
export function installStrictInput(app: Api): void {
  app.addHook('onRoute', (route) => {
    route.schema = { ...route.schema, querystring: route.schema?.querystring ?? NO_QUERY };
  });
  app.addHook('preValidation', async (request) => {
    refuseUnexpectedBody(request);
    coerceQuery(request);
  });
}
