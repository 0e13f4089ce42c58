/**
 * Code contexts and eval routes: contexts of a sandbox (create, list, restart, remove,
 * interrupt), eval in one (an Execution, or NDJSON events as the code runs), and eval
 * fan-out (N variants in N children branched from the same state). A stream's reader that
 * leaves interrupts the code; a failure after the stream began is a last `failed` line.
 */
import type { FastifyRequest } from 'fastify';
import {
  Context,
  ContextParams,
  CreateContext,
  EvalEvent,
  EvalForkRequest,
  EvalForkResult,
  EvalRequest,
  Execution,
} from '../../contract/contexts.js';
import { SandboxParams } from '../../contract/schemas.js';
import type { Services } from '../../services/contracts.js';
import { errorBody, toForkdError } from '../errors.js';
import { NdjsonStream } from '../ndjson.js';
import type { Api } from '../types.js';
import { callerOf, ERROR_RESPONSES, NO_CONTENT } from './common.js';
import { NDJSON } from './exec.js';
import Type from 'typebox';

const tags = ['eval'];

/** Copies eval events into the NDJSON stream; a hang-up stops reading (which interrupts). */
async function pump(events: AsyncIterable<unknown>, out: NdjsonStream, request: FastifyRequest) {
  try {
    for await (const ev of events) if (!(await out.line(ev))) return;
  } catch (err) {
    const e = toForkdError(err);
    request.errorCode = e.code;
    request.log.info({ err }, 'streaming eval failed');
    await out.line({ type: 'failed', ...errorBody(e) });
  } finally {
    out.close();
  }
}

export async function contextRoutes(app: Api, { services }: { services: Services }) {
  const contexts = services.contexts;

  app.post(
    '/v1/sandboxes/:id/contexts',
    {
      schema: {
        summary: 'Start a code context (a warm interpreter) in the sandbox',
        tags,
        params: SandboxParams,
        body: CreateContext,
        response: { 201: Context, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) =>
      reply.code(201).send(await contexts.create(request.params.id, request.body)),
  );

  app.get(
    '/v1/sandboxes/:id/contexts',
    {
      schema: {
        summary: "The sandbox's code contexts",
        tags,
        params: SandboxParams,
        response: { 200: Type.Array(Context), ...ERROR_RESPONSES },
      },
    },
    async (request) => contexts.list(request.params.id),
  );

  app.delete(
    '/v1/sandboxes/:id/contexts/:name',
    {
      schema: {
        summary: 'End a code context and forget its state',
        tags,
        params: ContextParams,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await contexts.remove(request.params.id, request.params.name);
      return reply.code(204).send();
    },
  );

  app.post(
    '/v1/sandboxes/:id/contexts/:name/restart',
    {
      schema: {
        summary: 'Replace the interpreter: fresh state, same cwd and env',
        tags,
        params: ContextParams,
        response: { 200: Context, ...ERROR_RESPONSES },
      },
    },
    async (request) => contexts.restart(request.params.id, request.params.name),
  );

  app.post(
    '/v1/sandboxes/:id/contexts/:name/interrupt',
    {
      schema: {
        summary: 'Interrupt the running code (KeyboardInterrupt); the context lives on',
        tags,
        params: ContextParams,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await contexts.interrupt(request.params.id, request.params.name);
      return reply.code(204).send();
    },
  );

  app.post(
    '/v1/sandboxes/:id/eval',
    {
      config: { counts: 'execs' },
      schema: {
        summary: 'Run code in a context; with stream:true, answer NDJSON events as it runs',
        tags,
        params: SandboxParams,
        body: EvalRequest,
        response: {
          200: {
            description: 'Execution, or with stream:true one EvalEvent per line',
            content: {
              'application/json': { schema: Execution },
              [NDJSON]: { schema: EvalEvent },
            },
          },
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      if (!request.body.stream) {
        return reply.type('application/json').send(await contexts.eval(id, request.body));
      }
      const events = await contexts.evalStream(id, request.body);
      const out = new NdjsonStream();
      void pump(events, out, request);
      return reply.type(NDJSON).send(out);
    },
  );

  app.post(
    '/v1/sandboxes/:id/eval-fork',
    {
      schema: {
        summary: 'Fan-out: branch the sandbox into one child per variant, run each, answer all',
        tags,
        params: SandboxParams,
        body: EvalForkRequest,
        response: { 200: EvalForkResult, ...ERROR_RESPONSES },
      },
    },
    async (request) => contexts.evalFork(request.params.id, request.body, callerOf(request)),
  );
}
