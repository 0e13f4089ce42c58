/**
 * E2B's template build routes (`Template.build` of the `e2b` SDK): request a build
 * (`POST /v3/templates`), an upload link per COPY archive (`GET
 * /templates/:id/files/:hash`, served by this listener at `PUT /e2b/template-files/:hash`
 * with a signed token, since the SDK sends no API key there), start it with its steps
 * (`POST /v2/templates/:id/builds/:build`), poll its status and log, and ask whether a name
 * exists (`GET /templates/aliases/:alias`). The template's name is the forkd snapshot tag
 * the build publishes, so `Sandbox.create(name)` forks it. docs/e2b.md "Template.build".
 */
import { timingSafeEqual } from 'node:crypto';
import type { Readable } from 'node:stream';
import { NAME_RULE } from '../../contract/rules.js';
import { ForkdError } from '../../errors.js';
import type { Api } from '../types.js';
import type { E2bContext } from './app.js';
import { bad, bodyOf, type Body } from './control.js';
import { TemplateBuilds, type TemplateRequest } from './template-builds.js';
import { checkHash, parseTemplateStart } from './template-steps.js';

/** The SDK reads at most this many log entries per poll, and polls until none come. */
const LOG_PAGE = 100;

function optInt(body: Body, field: string): number | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    throw bad(field, 'must be a whole number ≥ 1');
  }
  return v;
}

/** `name` (or the older `alias`), `name:tag` and `tags`: forkd has one snapshot per name. */
export function parseTemplateRequest(body: Body): TemplateRequest {
  const raw = body.name ?? body.alias;
  if (typeof raw !== 'string' || !raw) throw bad('name', 'a template build needs a name');
  const [name, tag] = raw.split(':', 2) as [string, string | undefined];
  const tags = body.tags ?? [];
  if (!Array.isArray(tags)) throw bad('tags', 'must be an array of strings');
  const extra = [...(tag ? [tag] : []), ...tags].filter((t) => t !== 'default');
  if (extra.length) {
    throw new ForkdError(
      'bad_request',
      `template tags (${extra.join(', ').slice(0, 100)}) are not supported by forkd's E2B listener: a name is one snapshot tag; build under a name of its own (${name}-${String(extra[0]).slice(0, 20)})`,
    );
  }
  if (!NAME_RULE.test(name)) {
    throw bad(
      'name',
      `"${name.slice(0, 80)}" is not a forkd snapshot tag (1 to 63 characters of a-z, 0-9, ".", "_" and "-")`,
    );
  }
  const cpus = optInt(body, 'cpuCount');
  const memory = optInt(body, 'memoryMB');
  return { name, ...(cpus ? { cpus } : {}), ...(memory ? { memory_mib: memory } : {}) };
}

function pageOf(query: Record<string, unknown>): { offset: number; limit: number } {
  const num = (field: string, dflt: number): number => {
    const v = query[field];
    if (v === undefined || v === '') return dflt;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw bad(field, 'must be a whole number ≥ 0');
    return n;
  };
  return { offset: num('logsOffset', 0), limit: Math.min(num('limit', LOG_PAGE), LOG_PAGE) };
}

export async function templateRoutes(
  app: Api,
  { ctx, filesDir }: { ctx: E2bContext; filesDir: string },
) {
  const config = { plane: 'control' as const };
  const builds = new TemplateBuilds(ctx.services, filesDir);
  const uploadToken = (hash: string) => ctx.accessToken(`upload-${hash}`);
  // The SDK's upload is a bare PUT of a (gzipped) tar with no content type: taken as a stream.
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));

  app.post('/v3/templates', { config }, async (request, reply) => {
    const t = parseTemplateRequest(bodyOf(request));
    const ids = builds.request(t);
    request.auditTarget = t.name;
    return reply.code(202).send({
      ...ids,
      public: false,
      names: [t.name],
      aliases: [t.name],
      tags: ['default'],
    });
  });

  app.get('/templates/:templateID/files/:hash', { config }, async (request) => {
    const { templateID, hash } = request.params as { templateID: string; hash: string };
    checkHash(hash);
    if (await builds.present(templateID, hash)) return { present: true };
    const host = request.headers.host ?? `${request.hostname}`;
    const url = `${request.protocol}://${host}/e2b/template-files/${hash}?token=${encodeURIComponent(uploadToken(hash))}`;
    return { present: false, url };
  });

  app.put('/e2b/template-files/:hash', { config: { plane: 'public' } }, async (request, reply) => {
    const { hash } = request.params as { hash: string };
    checkHash(hash);
    const token = String((request.query as Record<string, unknown>).token ?? '');
    const want = Buffer.from(uploadToken(hash));
    const got = Buffer.from(token);
    if (got.length !== want.length || !timingSafeEqual(got, want)) {
      throw new ForkdError(
        'unauthorized',
        'wrong or missing upload token: ask for a new upload link',
      );
    }
    const body = request.body as Readable | undefined;
    if (!body || typeof body.pipe !== 'function') throw bad('body', 'the upload needs a body');
    await builds.store(hash, body);
    return reply.code(200).send();
  });

  app.post('/v2/templates/:templateID/builds/:buildID', { config }, async (request, reply) => {
    const { templateID, buildID } = request.params as { templateID: string; buildID: string };
    const req = parseTemplateStart(bodyOf(request));
    await builds.start(templateID, buildID, req, { principal: request.principal });
    request.auditTarget = templateID;
    return reply.code(202).send();
  });

  app.get('/templates/:templateID/builds/:buildID/status', { config }, async (request) => {
    const { templateID, buildID } = request.params as { templateID: string; buildID: string };
    const { offset, limit } = pageOf(request.query as Record<string, unknown>);
    const b = builds.build(templateID, buildID);
    const entries = b.log.slice(offset, offset + limit);
    return {
      templateID,
      buildID,
      status: b.status,
      logs: entries.map((e) => `[${e.timestamp}] ${e.message}`),
      logEntries: entries,
      ...(b.reason ? { reason: { ...b.reason, logEntries: b.log.slice(-20) } } : {}),
    };
  });

  app.get('/templates/aliases/:alias', { config }, async (request) => {
    const { alias } = request.params as { alias: string };
    await ctx.services.snapshots.get(alias).catch(() => {
      throw new ForkdError('not_found', `no template ${alias.slice(0, 64)}`);
    });
    return { templateID: alias, public: false };
  });
}
