/**
 * Network routes of a sandbox: its network (mode, policy, denials, ports), a run-time
 * policy change (PATCH), published ports, and the HTTP route through the daemon to a guest
 * port (`/v1/sandboxes/:id/ports/:port/…`, authenticated like every route), which streams
 * the request and the answer through without buffering either.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import Type from 'typebox';
import { ForkdError } from '../../errors.js';
import type { NetworkService, Services } from '../../services/contracts.js';
import {
  PatchNetwork,
  PortList,
  PortParams,
  PublishedPort,
  PublishPort,
  SandboxNetwork,
  SandboxParams,
} from '../../contract/schemas.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES, NO_CONTENT } from './common.js';

const tags = ['network'];
/** Headers that belong to one hop, never forwarded (RFC 9110 §7.6.1), and our credentials. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
  'authorization',
]);
const PROXY_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
/** The rest of the path (`*`) is the guest's; the schema names the two parameters it checks. */
const ProxyParams = Type.Object({
  id: SandboxParams.properties.id,
  port: PortParams.properties.port,
});

/** A port from the path (the schema checked its digits). */
function portOf(text: string): number {
  const port = Number(text);
  if (port > 65535) {
    throw new ForkdError('bad_request', `port ${text} is outside 1–65535`, {
      field: 'params.port',
    });
  }
  return port;
}

function networkOf(services: Services): NetworkService {
  if (services.network) return services.network;
  throw new ForkdError('setup_required', 'this daemon runs without networking', {});
}

function forwardHeaders(h: Record<string, string | string[] | undefined>) {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  return out;
}

/** Send the request to the guest port; resolves with its answer's head. */
function toGuest(
  target: { host: string; port: number },
  request: FastifyRequest,
  path: string,
  guestPort: number,
): Promise<IncomingMessage> {
  const body = request.body as NodeJS.ReadableStream | undefined;
  const streamed = body !== undefined && typeof body.pipe === 'function';
  const headers = forwardHeaders(request.headers);
  // A body Fastify did not hand over (a GET's, or one without a type) is not sent: its length
  // must not be announced, or the guest's server reads the next request as that body.
  if (!streamed) delete headers['content-length'];
  return new Promise((resolve, reject) => {
    let up: ReturnType<typeof httpRequest>;
    try {
      // A connection per request (agent: false): a pooled one that a cut-short body left
      // mid-request would corrupt the next request sent on it.
      up = httpRequest({ ...target, method: request.method, path, headers, agent: false }, resolve);
    } catch (e) {
      // Node refuses a path or header it could not put on the wire: the client sent it.
      throw new ForkdError(
        'bad_request',
        `cannot forward this request to the guest: ${(e as Error).message}`,
        {
          port: guestPort,
        },
      );
    }
    up.on('error', (e) =>
      reject(
        new ForkdError(
          'port_unreachable',
          `nothing answered on port ${guestPort} in the sandbox (${e.message}): start a server listening on it`,
          { port: guestPort },
        ),
      ),
    );
    if (streamed) body.pipe(up);
    else up.end();
  });
}

/**
 * The guest's part of the URL as the client sent it, still percent-encoded: `*` is decoded,
 * which would turn `%2F` and `%3F` into separators and leave non-ASCII Node cannot send.
 */
function guestPath(url: string): string {
  const q = url.indexOf('?');
  const path = q >= 0 ? url.slice(0, q) : url;
  // '', 'v1', 'sandboxes', id, 'ports', port, then the guest's path
  const rest = path.split('/').slice(6).join('/');
  return `/${rest}${q >= 0 ? url.slice(q) : ''}`;
}

async function proxy(network: NetworkService, request: FastifyRequest, reply: FastifyReply) {
  const params = request.params as { id: string; port: string };
  const port = portOf(params.port);
  const target = await network.reach(params.id, port);
  const path = guestPath(request.url);
  const answer = await toGuest(target, request, path, port);
  reply.code(answer.statusCode ?? 502);
  reply.headers(forwardHeaders(answer.headers));
  return reply.send(answer);
}

export async function networkRoutes(app: Api, { services }: { services: Services }) {
  app.get(
    '/v1/sandboxes/:id/network',
    {
      schema: {
        summary: "A sandbox's network: mode, egress policy, denials so far, published ports",
        tags,
        params: SandboxParams,
        response: { 200: SandboxNetwork, ...ERROR_RESPONSES },
      },
    },
    async (request) => networkOf(services).get(request.params.id),
  );

  app.patch(
    '/v1/sandboxes/:id/network',
    {
      schema: {
        summary: "Change a running sandbox's egress policy (new connections follow it)",
        tags,
        params: SandboxParams,
        body: PatchNetwork,
        response: { 200: SandboxNetwork, ...ERROR_RESPONSES },
      },
    },
    async (request) => networkOf(services).patch(request.params.id, request.body.egress),
  );

  app.get(
    '/v1/sandboxes/:id/ports',
    {
      schema: {
        summary: "A sandbox's published ports",
        tags,
        params: SandboxParams,
        response: { 200: PortList, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({ ports: (await networkOf(services).get(request.params.id)).ports }),
  );

  app.post(
    '/v1/sandboxes/:id/ports',
    {
      schema: {
        summary: "Publish a guest port on the host's loopback",
        tags,
        params: SandboxParams,
        body: PublishPort,
        response: { 201: PublishedPort, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { port, host_port } = request.body;
      const published = await networkOf(services).publish(request.params.id, port, host_port);
      return reply.code(201).send(published);
    },
  );

  app.delete(
    '/v1/sandboxes/:id/ports/:port',
    {
      schema: {
        summary: 'Stop publishing a guest port',
        tags,
        params: PortParams,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await networkOf(services).unpublish(request.params.id, portOf(request.params.port));
      return reply.code(204).send();
    },
  );

  // The route to a guest port takes any body and query: its own context passes them through.
  await app.register(async (raw: Api) => {
    raw.removeAllContentTypeParsers();
    raw.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
    raw.route({
      method: [...PROXY_METHODS],
      url: '/v1/sandboxes/:id/ports/:port/*',
      config: { rawBody: true },
      schema: {
        summary: 'HTTP to a guest port through the daemon (nothing is published)',
        tags,
        params: ProxyParams,
        querystring: Type.Object({}, { additionalProperties: true }),
      },
      handler: (request, reply) => proxy(networkOf(services), request, reply),
    });
  });
}
