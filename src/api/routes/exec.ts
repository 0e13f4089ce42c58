/**
 * Exec routes: run a command (buffered JSON answer, or NDJSON events streamed as output is
 * produced), feed a streaming exec's stdin, signal it. The streaming protocol is in
 * docs/api.md: a `started` line first, then stdout/stderr chunks (base64), then `exit`;
 * a failure after the stream began becomes a final `error` line. A client that disconnects
 * mid-stream gets its exec killed: nobody could read its output any more. The hang-up is
 * seen when the response closes, not only at the next write, so a silent command (`sleep`,
 * a server) is killed too.
 */
import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import { ForkdError } from '../../errors.js';
import type { ExecStream, SandboxService, Services } from '../../services/contracts.js';
import { errorBody, toForkdError } from '../errors.js';
import { NdjsonStream } from '../ndjson.js';
import { acceptRawBodies, bufferedBody } from '../raw-body.js';
import {
  ExecEvent,
  ExecParams,
  ExecRequest,
  ExecResult,
  KillExec,
  SandboxParams,
  StdinQuery,
  type ExecRequestT,
} from '../../contract/schemas.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES, NO_CONTENT } from './common.js';

const tags = ['exec'];
export const NDJSON = 'application/x-ndjson';
/** One stdin chunk is buffered whole; larger input is sent as several chunks. */
export const STDIN_CHUNK_LIMIT = 1024 * 1024;

/** Cross-field rules the schema cannot state. */
function checkExec(body: ExecRequestT): void {
  if (body.keep_stdin_open && !body.stream) {
    throw new ForkdError('bad_request', 'keep_stdin_open needs stream: true', {
      field: 'body.keep_stdin_open',
      reason: 'needs stream: true',
    });
  }
}

type ExecEventIn = ExecStream['events'] extends AsyncIterable<infer E> ? E : never;

/** The wire form of one service event: output bytes become base64. */
function toLine(ev: ExecEventIn): unknown {
  return ev.type === 'exit' ? ev : { type: ev.type, data: ev.data.toString('base64') };
}

interface Pump {
  exec: ExecStream;
  pid: number;
  out: NdjsonStream;
  request: FastifyRequest;
  /** Called when the client is gone before the exit (idempotent). */
  onGone: () => Promise<void>;
}

/** Copies the service's events into the NDJSON stream until the exit, an error or a hang-up. */
async function pump({ exec, pid, out, request, onGone }: Pump): Promise<void> {
  out.once('close', onGone);
  try {
    if (!(await out.line({ type: 'started', exec_id: exec.execId, pid }))) return await onGone();
    for await (const ev of exec.events) {
      if (!(await out.line(toLine(ev)))) return await onGone();
    }
  } catch (err) {
    const e = toForkdError(err);
    request.errorCode = e.code;
    logFailure(request.log, err, e.status);
    await out.line({ type: 'error', ...errorBody(e) });
  } finally {
    out.off('close', onGone);
    out.close();
  }
}

function logFailure(log: FastifyBaseLogger, err: unknown, status: number): void {
  if (status >= 500) log.error({ err }, 'streaming exec failed');
  else log.info({ err }, 'streaming exec ended with a client error');
}

/** Starts a streaming exec; errors before the first line are ordinary error answers. */
async function startStream(
  sandboxes: SandboxService,
  id: string,
  body: ExecRequestT,
  request: FastifyRequest,
): Promise<NdjsonStream> {
  const exec = await sandboxes.execStream(id, body);
  const pid = await exec.pid;
  const out = new NdjsonStream();
  let gone = false;
  const onGone = async () => {
    if (gone) return;
    gone = true;
    request.log.info({ exec_id: exec.execId }, 'client left a streaming exec: killing it');
    await sandboxes.killExec(id, exec.execId, 'SIGKILL').catch(() => undefined);
  };
  void pump({ exec, pid, out, request, onGone });
  return out;
}

export async function execRoutes(app: Api, { services }: { services: Services }) {
  const sandboxes = services.sandboxes;

  app.post(
    '/v1/sandboxes/:id/exec',
    {
      config: { counts: 'execs' },
      schema: {
        summary: 'Run a command; with stream:true, answer NDJSON events as output is produced',
        tags,
        params: SandboxParams,
        body: ExecRequest,
        response: {
          200: {
            description: 'ExecResult, or with stream:true one ExecEvent per line',
            content: {
              'application/json': { schema: ExecResult },
              [NDJSON]: { schema: ExecEvent },
            },
          },
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      checkExec(request.body);
      if (!request.body.stream) {
        return reply.type('application/json').send(await sandboxes.exec(id, request.body));
      }
      return reply.type(NDJSON).send(await startStream(sandboxes, id, request.body, request));
    },
  );

  app.post(
    '/v1/sandboxes/:id/execs/:exec_id/kill',
    {
      schema: {
        summary: 'Send a signal to a streaming exec (default SIGKILL)',
        tags,
        params: ExecParams,
        body: KillExec,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { id, exec_id } = request.params;
      await sandboxes.killExec(id, exec_id, request.body.signal ?? 'SIGKILL');
      return reply.code(204).send();
    },
  );

  await app.register(async (raw: Api) => {
    acceptRawBodies(raw);
    raw.post(
      '/v1/sandboxes/:id/execs/:exec_id/stdin',
      {
        config: { rawBody: true },
        schema: {
          summary:
            'Write bytes to the stdin of a streaming exec (keep_stdin_open); eof=true closes it',
          tags,
          params: ExecParams,
          querystring: StdinQuery,
          response: { ...NO_CONTENT, ...ERROR_RESPONSES },
        },
      },
      async (request, reply) => {
        const { id, exec_id } = request.params;
        const headers = request.headers['content-length'];
        const data = await bufferedBody(request.body, headers, STDIN_CHUNK_LIMIT);
        await sandboxes.writeStdin(id, exec_id, data, request.query.eof ?? false);
        return reply.code(204).send();
      },
    );
  });
}
