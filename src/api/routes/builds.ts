/**
 * POST /v1/builds (docs/build.md): the build context as the raw body (a tar stream), the
 * Dockerfile's path, tag and options in the query; the answer is NDJSON: the build's
 * events, then `done` with the result or `error` with the catalog body (a refusal before
 * the first event is a plain error answer). POST /v1/builds/prune removes unused step
 * snapshots.
 */
import Type from 'typebox';
import { BuildQuery, PruneBuildsResult } from '../../contract/schemas.js';
import { ForkdError } from '../../errors.js';
import type { BuildEvent, BuildResult, BuildService, Services } from '../../services/contracts.js';
import { acceptRawBodies, limitedBody } from '../raw-body.js';
import type { Api } from '../types.js';
import { callerOf, ERROR_RESPONSES } from './common.js';
import { NDJSON } from './exec.js';
import { progressStream } from './progress-stream.js';
import { clientGone } from './snapshots.js';

const tags = ['builds'];
/** A build context is at most this large (a context is sources, not data sets). */
const MAX_CONTEXT_BYTES = 8 * 1024 ** 3;

export async function buildRoutes(app: Api, { services }: { services: Services }) {
  const builds = (): BuildService => {
    if (services.builds) return services.builds;
    throw new ForkdError('unsupported', 'this daemon does not offer builds');
  };
  app.post(
    '/v1/builds/prune',
    {
      schema: {
        summary: 'Remove the build step snapshots nothing uses',
        tags,
        response: { 200: PruneBuildsResult, ...ERROR_RESPONSES },
      },
    },
    async () => ({ removed: await builds().prune() }),
  );
  await app.register(async (raw: Api) => {
    acceptRawBodies(raw);
    raw.post(
      '/v1/builds',
      {
        config: { rawBody: true },
        schema: {
          summary: 'Build a snapshot from a Dockerfile; the body is the context as a tar stream',
          tags,
          querystring: BuildQuery,
          response: {
            200: {
              description: 'NDJSON: BuildEvent lines, then done (result) or error',
              content: { [NDJSON]: { schema: Type.String() } },
            },
            ...ERROR_RESPONSES,
          },
        },
      },
      async (request, reply) => {
        const length = request.headers['content-length'];
        const body = limitedBody(request.body, length, MAX_CONTEXT_BYTES);
        const signal = clientGone(reply);
        const stream = await progressStream<BuildEvent, BuildResult>(
          (onEvent) => builds().build(request.query, body, callerOf(request), onEvent, signal),
          request,
          { progress: (e) => e, done: (result) => ({ result }), failed: 'build failed' },
        );
        return reply.code(200).type(NDJSON).send(stream);
      },
    );
  });
}
