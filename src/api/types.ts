/**
 * Types shared by the HTTP layer: the Fastify instance typed by the TypeBox provider, and
 * the per-request and per-route fields the plugins (auth, errors, audit, metrics) share.
 */
import type {
  FastifyBaseLogger,
  FastifyInstance,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';

/** The app every route module registers on: route schemas type the handlers. */
export type Api = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** The counters a successful answer can add to: forkd_boots_total, forkd_execs_total, … */
export type CountedMetric = 'boots' | 'execs' | 'forks' | 'branches';

/**
 * What one successful answer adds to each counter: a fork of 10 adds 10 forks; a branch
 * with 3 children adds 1 branch and 3 forks.
 */
export type Counted = Partial<Record<CountedMetric, number>>;

declare module 'fastify' {
  interface FastifyRequest {
    /** Who asked: the token id, `unix` without auth, `anonymous` before auth passed. */
    principal: string;
    /** The catalog code of the error answered, for audit and metrics; null on success. */
    errorCode: string | null;
    /** What a mutation acted on when the URL does not say (a created sandbox's id). */
    auditTarget: string | null;
    /** Set by a handler whose success counts otherwise than its route's `config.counts`. */
    counted: Counted | null;
    /** Set by a branch: how long its source was stopped, for forkd_branch_pause_seconds. */
    pauseMs: number | null;
  }
  interface FastifyContextConfig {
    /** Served without a bearer token (only /healthz). */
    public?: boolean;
    /** A successful answer counts one of these (forkd_boots_total, forkd_execs_total, …). */
    counts?: CountedMetric;
    /** The body is a raw application/octet-stream (documented as binary in OpenAPI). */
    rawBody?: boolean;
  }
}
