/**
 * Snapshot routes: create (a buffered answer, or NDJSON progress with `stream: true`), list,
 * get, verify, set the VMM pool size, remove. Forking is `POST /v1/sandboxes` with
 * `snapshot` (routes/sandboxes.ts). Each parses the request and calls the snapshot service.
 *
 * A create takes seconds to minutes (boot, warm-up, capture). Streamed, its answer is the
 * service's progress messages as it reports them, then `done` with the snapshot or
 * `error`; a failure before the first message is an ordinary error answer, as for
 * streaming exec. A client that hangs up (Ctrl-C) aborts the create: from then on the
 * progress callback the service was given throws, so the service stops at its next step
 * and cleans up as after any failure.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Value } from 'typebox/value';
import { ForkdError } from '../../errors.js';
import type { SnapshotService, Services } from '../../services/contracts.js';
import { errorBody, toForkdError } from '../errors.js';
import { NdjsonStream } from '../ndjson.js';
import {
  CreateSnapshot,
  PoolState,
  RemoveSnapshotQuery,
  SetPool,
  Snapshot,
  SnapshotEvent,
  SnapshotList,
  SnapshotParams,
  VerifyResult,
  type CreateSnapshotT,
  type SnapshotT,
} from '../../contract/schemas.js';
import type { Api } from '../types.js';
import { callerOf, ERROR_RESPONSES, NO_CONTENT } from './common.js';
import { NDJSON } from './exec.js';

const tags = ['snapshots'];

type Progress = (message: string) => void;

/** Cross-field rules the schema cannot state. */
function checkCreate(body: CreateSnapshotT): void {
  if (body.wait_for !== undefined && body.wait_port !== undefined) {
    throw new ForkdError('bad_request', 'body.wait_port: give wait_for or wait_port, not both', {
      field: 'body.wait_port',
      reason: 'not with wait_for',
    });
  }
}

/** Aborted when the client hangs up before its answer is complete. */
export function clientGone(reply: FastifyReply): AbortSignal {
  const gone = new AbortController();
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) {
      gone.abort(new DOMException('the client closed the connection', 'AbortError'));
    }
  });
  return gone.signal;
}

/** A progress callback that hands messages on until the client has gone, then throws. */
function progressUntil(signal: AbortSignal, say: Progress = () => undefined): Progress {
  return (message) => {
    signal.throwIfAborted();
    say(message);
  };
}

/** The snapshot as the contract has it: fields outside the schema are not sent. */
function wireSnapshot(snapshot: SnapshotT): SnapshotT {
  return Value.Clean(Snapshot, Value.Clone(snapshot)) as SnapshotT;
}

/** Ends a started stream with the create's outcome: `done`, or a last `error` line. */
async function finish(created: Promise<SnapshotT>, out: NdjsonStream, request: FastifyRequest) {
  try {
    out.send({ type: 'done', snapshot: wireSnapshot(await created) });
  } catch (err) {
    const e = toForkdError(err);
    request.errorCode = e.code;
    if (e.status >= 500) request.log.error({ err }, 'streaming snapshot create failed');
    else request.log.info({ err }, 'streaming snapshot create ended with a client error');
    out.send({ type: 'error', ...errorBody(e) });
  } finally {
    out.close();
  }
}

/**
 * Starts a create whose progress streams as NDJSON. Resolves with the stream once the first
 * progress message (or the outcome) is there; rejects when the create fails before that.
 */
async function startStream(
  snapshots: SnapshotService,
  req: CreateSnapshotT,
  request: FastifyRequest,
  signal: AbortSignal,
): Promise<NdjsonStream> {
  const out = new NdjsonStream();
  let begun!: () => void;
  const firstMessage = new Promise<void>((resolve) => (begun = resolve));
  const say: Progress = (message) => {
    out.send({ type: 'progress', message });
    begun();
  };
  const created = snapshots.create(req, callerOf(request), progressUntil(signal, say), signal);
  await Promise.race([firstMessage, created]);
  void finish(created, out, request);
  return out;
}

export async function snapshotRoutes(app: Api, { services }: { services: Services }) {
  const snapshots = services.snapshots;

  app.post(
    '/v1/snapshots',
    {
      schema: {
        summary:
          'Create a snapshot: boot, warm up, capture; with stream:true, answer NDJSON progress',
        tags,
        body: CreateSnapshot,
        response: {
          200: {
            description: 'with stream:true: one SnapshotEvent per line',
            content: { [NDJSON]: { schema: SnapshotEvent } },
          },
          201: Snapshot,
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request, reply) => {
      const { stream, ...req } = request.body;
      checkCreate(req);
      const signal = clientGone(reply);
      if (!stream) {
        const snapshot = await snapshots.create(
          req,
          callerOf(request),
          progressUntil(signal),
          signal,
        );
        return reply.code(201).send(snapshot);
      }
      const out = await startStream(snapshots, req, request, signal);
      return reply.code(200).type(NDJSON).send(out);
    },
  );

  app.get(
    '/v1/snapshots',
    {
      schema: {
        summary: 'List snapshots',
        tags,
        response: { 200: SnapshotList, ...ERROR_RESPONSES },
      },
    },
    async () => ({ snapshots: await snapshots.list() }),
  );

  app.get(
    '/v1/snapshots/:tag',
    {
      schema: {
        summary: 'Get one snapshot: files, sizes, lineage, pool, children, bootable',
        tags,
        params: SnapshotParams,
        response: { 200: Snapshot, ...ERROR_RESPONSES },
      },
    },
    async (request) => snapshots.get(request.params.tag),
  );

  app.post(
    '/v1/snapshots/:tag/verify',
    {
      schema: {
        summary: "Re-check a snapshot's files against the checksums of its manifest",
        tags,
        params: SnapshotParams,
        response: { 200: VerifyResult, ...ERROR_RESPONSES },
      },
    },
    async (request) => snapshots.verify(request.params.tag),
  );

  app.put(
    '/v1/snapshots/:tag/pool',
    {
      schema: {
        summary: "Set the size of a snapshot's pool of pre-started VMMs (0: no pool)",
        tags,
        params: SnapshotParams,
        body: SetPool,
        response: { 200: PoolState, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      snapshots.setPool(request.params.tag, request.body.size, {
        prewarm: request.body.prewarm,
      }),
  );

  app.delete(
    '/v1/snapshots/:tag',
    {
      schema: {
        summary:
          'Remove a snapshot; force kills the sandboxes forked from it, cascade removes the snapshots built on it',
        tags,
        params: SnapshotParams,
        querystring: RemoveSnapshotQuery,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { force, cascade } = request.query;
      await snapshots.remove(request.params.tag, { force, cascade });
      return reply.code(204).send();
    },
  );
}
