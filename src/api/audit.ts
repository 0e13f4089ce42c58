/**
 * The audit hook: every mutating request (POST, PUT, PATCH, DELETE), answered or refused,
 * becomes one entry for services.audit — who (principal), what (method and route pattern),
 * on what (sandbox id, image name or snapshot tag), the result (status and error code)
 * and how long.
 */
import type { FastifyRequest } from 'fastify';
import type { AuditLog } from '../services/contracts.js';
import type { Api } from './types.js';

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** Targets echo client input when validation failed: bound what reaches the log. */
const MAX_TARGET = 256;

const field = (value: unknown, key: string): string | undefined => {
  const v = (value as Record<string, unknown> | null | undefined)?.[key];
  return typeof v === 'string' ? v : undefined;
};

/**
 * The sandbox id, image name or snapshot tag the request acted on, from the URL, the result
 * or the body (a fork of n children is audited under its snapshot's tag).
 */
function targetOf(request: FastifyRequest): string | null {
  const t =
    field(request.params, 'id') ??
    field(request.params, 'name') ??
    field(request.params, 'tag') ??
    request.auditTarget ??
    field(request.body, 'name') ??
    field(request.body, 'tag') ??
    field(request.body, 'snapshot') ??
    field(request.query, 'tag') ?? // a build's tag: its body is the context's tar
    field(request.params, 'registry') ??
    field(request.body, 'registry');
  return t === undefined ? null : t.slice(0, MAX_TARGET);
}

/** Adds the hooks that record mutations in `log`. */
export function installAudit(app: Api, log: AuditLog): void {
  app.decorateRequest('auditTarget', null);
  // A created resource is named only in the answer: remember its id for the entry.
  app.addHook('preSerialization', async (request, _reply, payload) => {
    const id = field(payload, 'id') ?? field(payload, 'name') ?? field(payload, 'tag');
    if (MUTATING.has(request.method) && id !== undefined) request.auditTarget = id;
    return payload;
  });
  app.addHook('onResponse', async (request, reply) => {
    if (!MUTATING.has(request.method)) return;
    try {
      log.record({
        at: new Date().toISOString(),
        principal: request.principal,
        method: request.method,
        route: request.routeOptions.url ?? 'unmatched',
        target: targetOf(request),
        status: reply.statusCode,
        code: request.errorCode,
        duration_ms: Math.round(reply.elapsedTime * 1000) / 1000,
      });
    } catch (err) {
      // The answer is already sent; a failing audit store must be seen, not crash the request.
      request.log.error({ err }, 'audit record failed');
    }
  });
}
