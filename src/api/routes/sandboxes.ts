/**
 * Sandbox routes: create, list, get, extend (PATCH), kill, and the console log. Each parses
 * the request and calls the sandbox service; the service decides everything else.
 */
import Type from 'typebox';
import type { Services } from '../../services/contracts.js';
import {
  CreateSandbox,
  ListSandboxesQuery,
  PatchSandbox,
  Sandbox,
  SandboxList,
  SandboxParams,
} from '../schemas.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES, NO_CONTENT } from './common.js';

const tags = ['sandboxes'];

/** `key=value` → its two halves (the schema already checked the shape). */
function labelFilter(label: string | undefined): { key: string; value: string } | undefined {
  if (label === undefined) return undefined;
  const at = label.indexOf('=');
  return { key: label.slice(0, at), value: label.slice(at + 1) };
}

export async function sandboxRoutes(app: Api, { services }: { services: Services }) {
  const sandboxes = services.sandboxes;

  app.post(
    '/v1/sandboxes',
    {
      config: { counts: 'boots' },
      schema: {
        summary: 'Create a sandbox (boot it from an image)',
        tags,
        body: CreateSandbox,
        response: { 201: Sandbox, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const sandbox = await sandboxes.create(request.body, { principal: request.principal });
      return reply.code(201).send(sandbox);
    },
  );

  app.get(
    '/v1/sandboxes',
    {
      schema: {
        summary: 'List sandboxes, optionally by state and label',
        tags,
        querystring: ListSandboxesQuery,
        response: { 200: SandboxList, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const { state, label } = request.query;
      return { sandboxes: await sandboxes.list({ state, label: labelFilter(label) }) };
    },
  );

  app.get(
    '/v1/sandboxes/:id',
    {
      schema: {
        summary: 'Get one sandbox',
        tags,
        params: SandboxParams,
        response: { 200: Sandbox, ...ERROR_RESPONSES },
      },
    },
    async (request) => sandboxes.get(request.params.id),
  );

  app.patch(
    '/v1/sandboxes/:id',
    {
      schema: {
        summary: 'Extend a sandbox: it now expires timeout_s from now',
        tags,
        params: SandboxParams,
        body: PatchSandbox,
        response: { 200: Sandbox, ...ERROR_RESPONSES },
      },
    },
    async (request) => sandboxes.extend(request.params.id, request.body.timeout_s),
  );

  app.delete(
    '/v1/sandboxes/:id',
    {
      schema: {
        summary: 'Kill a sandbox',
        tags,
        params: SandboxParams,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await sandboxes.kill(request.params.id);
      return reply.code(204).send();
    },
  );

  app.get(
    '/v1/sandboxes/:id/logs',
    {
      schema: {
        summary: "The sandbox's console log (kernel and agent output)",
        tags,
        params: SandboxParams,
        response: {
          200: {
            description: 'console text',
            content: { 'text/plain': { schema: Type.String() } },
          },
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request, reply) =>
      reply.type('text/plain; charset=utf-8').send(await sandboxes.consoleLog(request.params.id)),
  );
}
