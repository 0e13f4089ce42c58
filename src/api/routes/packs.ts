/**
 * Pack routes (docs/packs.md): pack a snapshot into a file on the daemon host, unpack one,
 * push a snapshot to a registry, pull one (or an https:// pack file, or prefetch one for
 * forks by reference), and the node cache those pulls fill (list, prune). Each answers its
 * result, or with `stream: true` NDJSON progress lines then `done` (or `error`), as image
 * pulls do. A client that hangs up aborts a push or pull at its next request.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import {
  CacheInfo,
  CachePrune,
  CachePruneResult,
  PackEvent,
  PackResult,
  PackSnapshot,
  PullSnapshot,
  PushResult,
  PushSnapshot,
  SnapshotParams,
  UnpackResult,
  UnpackSnapshot,
} from '../../contract/schemas.js';
import { ForkdError } from '../../errors.js';
import type { PackService, Services } from '../../services/contracts.js';
import { progressStream } from './progress-stream.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES } from './common.js';
import { NDJSON } from './exec.js';
import { clientGone } from './snapshots.js';

const tags = ['packs'];

type Run = (onProgress: (message: string) => void) => Promise<unknown>;

/** The result (status `code`), or NDJSON once the first progress line (or the outcome) is there. */
async function answer(
  run: Run,
  stream: boolean | undefined,
  code: number,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  if (!stream) return reply.code(code).send(await run(() => undefined));
  const out = await progressStream(run, request, {
    progress: (message: string) => ({ message }),
    done: (result) => ({ result }),
    failed: 'a streamed pack operation ended with an error',
  });
  return reply.code(200).type(NDJSON).send(out);
}

function response(result: unknown, code: number) {
  return {
    200: {
      description: 'with stream:true: one PackEvent per line',
      content: { [NDJSON]: { schema: PackEvent } },
    },
    [code]: result,
    ...ERROR_RESPONSES,
  };
}

function absolute(file: string): string {
  if (file.startsWith('/')) return file;
  throw new ForkdError('bad_request', 'body.file: give an absolute path on the daemon host', {
    field: 'body.file',
  });
}

export async function packRoutes(app: Api, { services }: { services: Services }) {
  const packs = (): PackService => {
    if (services.packs) return services.packs;
    throw new ForkdError('unsupported', 'this daemon does not offer snapshot packs');
  };

  app.post(
    '/v1/snapshots/:tag/pack',
    {
      schema: {
        summary: 'Pack a snapshot, its chain and its image into a tar+zstd file on the daemon host',
        tags,
        params: SnapshotParams,
        body: PackSnapshot,
        response: response(PackResult, 201),
      },
    },
    async (request, reply) => {
      const { file, stream } = request.body;
      const run: Run = (say) => packs().pack(request.params.tag, absolute(file), say);
      return answer(run, stream, 201, request, reply);
    },
  );

  app.post(
    '/v1/snapshots/unpack',
    {
      schema: {
        summary: 'Verify a pack file on the daemon host in full, then install its snapshots',
        tags,
        body: UnpackSnapshot,
        response: response(UnpackResult, 201),
      },
    },
    async (request, reply) => {
      const { file, stream, ...opts } = request.body;
      const run: Run = (say) => packs().unpack(absolute(file), opts, say);
      return answer(run, stream, 201, request, reply);
    },
  );

  app.post(
    '/v1/snapshots/:tag/push',
    {
      schema: {
        summary: 'Push a snapshot and its chain to a registry as an OCI artifact',
        tags,
        params: SnapshotParams,
        body: PushSnapshot,
        response: response(PushResult, 200),
      },
    },
    async (request, reply) => {
      const { reference, stream, format } = request.body;
      const signal = clientGone(reply);
      const run: Run = (say) =>
        packs().push(request.params.tag, reference, say, signal, { format });
      return answer(run, stream, 200, request, reply);
    },
  );

  app.post(
    '/v1/snapshots/pull',
    {
      schema: {
        summary: 'Pull a pushed snapshot (or an https:// pack file) with its chain, and install it',
        tags,
        body: PullSnapshot,
        response: response(UnpackResult, 201),
      },
    },
    async (request, reply) => {
      const { stream, ...req } = request.body;
      const signal = clientGone(reply);
      return answer((say) => packs().pull(req, say, signal), stream, 201, request, reply);
    },
  );

  app.get(
    '/v1/cache',
    {
      schema: {
        summary: 'The node cache: chunks and snapshots pulled by reference, its size and counters',
        tags,
        response: { 200: CacheInfo, ...ERROR_RESPONSES },
      },
    },
    async () => packs().cacheInfo(),
  );

  app.post(
    '/v1/cache/prune',
    {
      schema: {
        summary: 'Evict the node cache down to its limit (all: everything no sandbox needs)',
        tags,
        body: CachePrune,
        response: { 200: CachePruneResult, ...ERROR_RESPONSES },
      },
    },
    async (request) => packs().pruneCache({ all: request.body?.all }),
  );
}
