/**
 * The one error handler: whatever failed, the client gets `{"error":{code,message,details}}`
 * with the catalog status of the code. ForkdErrors keep their code; Fastify's own errors
 * (validation, body too large, wrong content type, unknown route) are mapped onto catalog
 * codes; anything else is `internal`. A 5xx answer never carries a stack or a host path:
 * the full error goes to the log instead.
 */
import { Readable } from 'node:stream';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { ERROR_CATALOG, ForkdError, isForkdError, type ErrorCode } from '../errors.js';
import type { Api } from './types.js';

/** The wire form of an error. */
export interface ErrorBodyT {
  error: { code: ErrorCode; message: string; details?: Record<string, unknown> };
}

interface AjvIssue {
  instancePath: string;
  keyword: string;
  message?: string;
  params: { additionalProperty?: string; missingProperty?: string };
}

/** Field names echo client input: keep them short enough to log and show. */
const clip = (s: string, max = 120): string => (s.length > max ? `${s.slice(0, max)}…` : s);

/** `body.labels.x` from Ajv's `/labels` plus the property the keyword names. */
function fieldOf(context: string, issue: AjvIssue): string {
  const part = context === 'querystring' ? 'query' : context;
  const segments = issue.instancePath.split('/').filter(Boolean);
  const extra = issue.params.additionalProperty ?? issue.params.missingProperty;
  if (extra !== undefined) segments.push(extra);
  return clip([part, ...segments].join('.'));
}

function validationError(err: FastifyError): ForkdError {
  const issue = err.validation?.[0] as AjvIssue | undefined;
  if (!issue) return new ForkdError('bad_request', err.message);
  const field = fieldOf(err.validationContext ?? 'request', issue);
  const reason = issue.keyword === 'additionalProperties' ? 'unknown field' : issue.message;
  return new ForkdError('bad_request', `${field}: ${reason ?? 'invalid'}`, {
    field,
    reason: reason ?? 'invalid',
  });
}

/** Fastify reports its own client errors with a status; map the status onto the catalog. */
const BY_STATUS: Record<number, ErrorCode> = {
  404: 'not_found',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
};

/** Any thrown value → the catalog error the client will see. */
export function toForkdError(err: unknown): ForkdError {
  if (isForkdError(err)) return err;
  const fe = err as Partial<FastifyError>;
  if (fe.validation) return validationError(fe as FastifyError);
  const status = fe.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    const code = BY_STATUS[status] ?? 'bad_request';
    // Fastify's messages may quote the URL or body: bound what is echoed back.
    return new ForkdError(code, clip(fe.message ?? ERROR_CATALOG[code].meaning, 200));
  }
  return new ForkdError('internal', 'forkd failed unexpectedly; the daemon log has the details');
}

/** Absolute paths after a boundary: `/var/lib/forkd/…` becomes `<path>`. */
const HOST_PATH = /(^|[\s'"`(=:,[])\/[^\s'"`),\]]*/g;

function redact(value: unknown): unknown {
  if (typeof value === 'string') return value.replace(HOST_PATH, '$1<path>');
  if (Array.isArray(value)) return value.map(redact);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redact(v)]));
  }
  return value;
}

/** The body sent for `e`; server-side failures are scrubbed of host paths. */
export function errorBody(e: ForkdError): ErrorBodyT {
  const body: ErrorBodyT = { error: { code: e.code, message: e.message } };
  if (e.details) body.error.details = e.details;
  return e.status >= 500 ? (redact(body) as ErrorBodyT) : body;
}

/** Seconds a client should wait before retrying past a concurrency cap. */
function retryAfter(e: ForkdError): string {
  const s = Number(e.details?.retry_after_s);
  return String(Number.isFinite(s) && s > 0 ? Math.ceil(s) : 1);
}

/** A raw upload the handler never read: closing the connection spares reading gigabytes. */
function unreadUpload(request: FastifyRequest): boolean {
  const body = request.body;
  return body instanceof Readable && !body.readableEnded;
}

/** Sends `err` as its catalog answer. */
function answer(err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const e = toForkdError(err);
  request.errorCode = e.code;
  if (e.status >= 500) request.log.error({ err }, `answered ${e.code}`);
  else request.log.info({ code: e.code, message: e.message }, 'client error');
  if (e.code === 'capacity') void reply.header('retry-after', retryAfter(e));
  if (unreadUpload(request)) void reply.header('connection', 'close');
  return reply.code(e.status).type('application/json; charset=utf-8').send(errorBody(e));
}

/**
 * Fastify's option for the errors its router raises before any route (a malformed URL, a
 * path segment over the length limit): these bypass the error handler otherwise.
 */
export const frameworkErrors = (err: FastifyError, request: FastifyRequest, reply: FastifyReply) =>
  answer(err, request, reply);

/** Sets the error handler and the unknown-route handler. */
export function installErrorHandler(app: Api): void {
  app.setErrorHandler((err, request, reply) => answer(err, request, reply));
  app.setNotFoundHandler(() => {
    throw new ForkdError('not_found', 'no such route: GET /v1/openapi.json lists them');
  });
}
