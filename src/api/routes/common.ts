/**
 * Pieces every route module shares: the error responses each route documents, and the
 * empty 204 answer.
 */
import Type from 'typebox';

/** Error answers, by status class: every route can fail with a catalog error. */
export const ERROR_RESPONSES = {
  '4xx': Type.Ref('Error', { description: 'a client error from the catalog (docs/errors.md)' }),
  '5xx': Type.Ref('Error', { description: 'a server error from the catalog (docs/errors.md)' }),
};

/** A 204 answer: done, no body. */
export const NO_CONTENT = { 204: Type.Null({ description: 'done; no body' }) };
