/**
 * Pieces every route module shares: the error responses each route documents, the empty
 * 204 answer, the caller a service is told about, and the cross-field error.
 */
import type { FastifyRequest } from 'fastify';
import Type from 'typebox';
import { ForkdError } from '../../errors.js';
import type { Caller } from '../../services/contracts.js';

/** Error answers, by status class: every route can fail with a catalog error. */
export const ERROR_RESPONSES = {
  '4xx': Type.Ref('Error', { description: 'a client error from the catalog (docs/errors.md)' }),
  '5xx': Type.Ref('Error', { description: 'a server error from the catalog (docs/errors.md)' }),
};

/** A 204 answer: done, no body. */
export const NO_CONTENT = { 204: Type.Null({ description: 'done; no body' }) };

/** Who asked, as the services take it. */
export const callerOf = (request: FastifyRequest): Caller => ({ principal: request.principal });

/** A `bad_request` for a body field a rule between fields refuses (the schema cannot say). */
export function fieldConflict(field: string, reason: string): ForkdError {
  return new ForkdError('bad_request', `body.${field}: ${reason}`, {
    field: `body.${field}`,
    reason,
  });
}
