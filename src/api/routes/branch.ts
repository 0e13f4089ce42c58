/**
 * Branch, chains and lineage routes: branch a running sandbox into a new snapshot (and
 * optionally fork children of it in the same call), compact a chained snapshot into a
 * standalone one, and the lineage of images, snapshots and live sandboxes. Each parses the
 * request and calls the snapshot service. Removing a chain (`cascade`) is DELETE
 * /v1/snapshots/:tag (routes/snapshots.ts).
 */
import type { FastifyBaseLogger } from 'fastify';
import type { BranchOutcome, Services } from '../../services/contracts.js';
import {
  BranchRequest,
  BranchResult,
  CompactSnapshot,
  Lineage,
  LineageQuery,
  SandboxParams,
  Snapshot,
  SnapshotParams,
  type BranchRequestT,
  type BranchResultT,
} from '../../contract/schemas.js';
import type { Api } from '../types.js';
import { callerOf, ERROR_RESPONSES, fieldConflict } from './common.js';
import { forkAnswer } from './sandboxes.js';

const tags = ['branch'];

/**
 * Cross-field rules the schema cannot state: children are forked from a complete snapshot,
 * so a branch that answers before its files are written cannot fork any; an idle policy
 * is its children's (a snapshot has none).
 */
function checkBranch(body: BranchRequestT): void {
  if (body.no_wait && body.fork) {
    throw fieldConflict('no_wait', 'not with fork: children need the finished snapshot');
  }
  if (body.idle !== undefined && !body.fork) {
    throw fieldConflict('idle', "only with fork: it is the children's idle policy");
  }
}

/** The answer as sent: the children's errors in catalog form, 5xx ones scrubbed. */
function branchAnswer(result: BranchOutcome, log: FastifyBaseLogger): BranchResultT {
  const { children, ...rest } = result;
  return children ? { ...rest, children: forkAnswer(children, log) } : rest;
}

export async function branchRoutes(app: Api, { services }: { services: Services }) {
  const { snapshots, branch } = services;

  app.post(
    '/v1/sandboxes/:id/branch',
    {
      schema: {
        summary:
          'Branch a running sandbox: capture it into a new snapshot while it keeps running; fork children of it with fork',
        tags,
        params: SandboxParams,
        body: BranchRequest,
        response: { 201: BranchResult, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      checkBranch(request.body);
      const result = await branch.branch(request.params.id, request.body, callerOf(request));
      request.counted = { branches: 1, forks: result.children?.sandboxes.length ?? 0 };
      request.pauseMs = result.pause_ms;
      return reply.code(201).send(branchAnswer(result, request.log));
    },
  );

  app.post(
    '/v1/snapshots/:tag/compact',
    {
      schema: {
        summary: 'Flatten a chained snapshot into a standalone one under a new tag',
        tags,
        params: SnapshotParams,
        body: CompactSnapshot,
        response: { 201: Snapshot, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { tag } = request.params;
      if (request.body.to === tag) throw fieldConflict('to', 'must differ from the snapshot tag');
      const snapshot = await snapshots.compact(tag, request.body.to, callerOf(request));
      return reply.code(201).send(snapshot);
    },
  );

  app.get(
    '/v1/lineage',
    {
      schema: {
        summary:
          "Every image, snapshot and live sandbox with its parent edge; with tag, that snapshot's subtree",
        tags,
        querystring: LineageQuery,
        response: { 200: Lineage, ...ERROR_RESPONSES },
      },
    },
    async (request) => snapshots.lineage(request.query.tag),
  );
}
