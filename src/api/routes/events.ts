/**
 * GET /v1/events: a server-sent event stream of sandbox and snapshot changes, what the web
 * UI redraws its lineage tree on. Each change is an `event: change` whose data is one
 * ChangeEvent; a comment line every HEARTBEAT_MS keeps proxies from closing an idle stream.
 * A client too slow to read is cut (it reconnects and reloads what it shows) rather than
 * buffered without bound.
 */
import { Readable } from 'node:stream';
import Type from 'typebox';
import { EventsQuery, type ChangeEventT, type EventsQueryT } from '../../contract/schemas.js';
import type { Services } from '../../services/contracts.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES } from './common.js';

export const HEARTBEAT_MS = 15_000;
/** Unread bytes a client may fall behind by before its stream is cut. */
export const MAX_BACKLOG = 1024 * 1024;

/** One change as server-sent event text. */
export function sseFrame(event: ChangeEventT): string {
  return `event: change\ndata: ${JSON.stringify(event)}\n\n`;
}

/**
 * The stream of one client: changes from `services`, heartbeats; it ends when the client
 * goes or after `timeoutS`.
 */
function eventStream(services: Services, timeoutS?: number): Readable {
  const stream = new Readable({ read: () => undefined });
  const send = (text: string) => {
    if (stream.destroyed) return;
    if (stream.readableLength > MAX_BACKLOG) stream.destroy();
    else stream.push(text);
  };
  // `retry` is how long a browser waits before reconnecting; the comment opens the stream.
  send('retry: 2000\n: forkd events\n\n');
  const unsubscribe = services.events?.subscribe((e) => send(sseFrame(e))) ?? (() => undefined);
  const heartbeat = setInterval(() => send(': ping\n\n'), HEARTBEAT_MS);
  heartbeat.unref();
  const deadline =
    timeoutS === undefined ? undefined : setTimeout(() => stream.push(null), timeoutS * 1000);
  stream.once('close', () => {
    clearInterval(heartbeat);
    clearTimeout(deadline);
    unsubscribe();
  });
  return stream;
}

export async function eventRoutes(app: Api, { services }: { services: Services }) {
  app.get<{ Querystring: EventsQueryT }>(
    '/v1/events',
    {
      schema: {
        querystring: EventsQuery,
        summary: 'Sandbox and snapshot changes as server-sent events (`event: change`)',
        tags: ['events'],
        produces: ['text/event-stream'],
        response: {
          200: Type.Ref('ChangeEvent', {
            description: 'text/event-stream; the data of each `change` event is a ChangeEvent',
          }),
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request, reply) => {
      const stream = eventStream(services, request.query.timeout_s);
      request.raw.once('close', () => stream.destroy());
      return reply
        .type('text/event-stream')
        .header('cache-control', 'no-cache')
        .header('x-accel-buffering', 'no')
        .send(stream);
    },
  );
}
