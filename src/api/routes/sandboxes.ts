/**
 * Sandbox routes: create (boot from an image, or fork from a snapshot), list, get, change
 * (PATCH: timeout, limits, idle policy), kill, pause and resume (idle tiers), and the console
 * log. Each parses the request and calls the sandbox service (or, for a fork, the snapshot
 * service); the services decide everything else.
 */
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import { isForkdError } from '../../errors.js';
import Type from 'typebox';
import type { ForkOutcome, ForkRequest, Services } from '../../services/contracts.js';
import { errorBody, toForkdError } from '../errors.js';
import {
  CreateSandbox,
  KillSandboxQuery,
  ListSandboxesQuery,
  PatchSandbox,
  PauseSandbox,
  Sandbox,
  SandboxList,
  SandboxParams,
  type CreateSandboxT,
  type ForkResultT,
  type SandboxT,
} from '../../contract/schemas.js';
import type { Api } from '../types.js';
import { callerOf, ERROR_RESPONSES, fieldConflict, NO_CONTENT } from './common.js';

const tags = ['sandboxes'];

/** `key=value` → its two halves (the schema already checked the shape). */
function labelFilter(label: string | undefined): { key: string; value: string } | undefined {
  if (label === undefined) return undefined;
  const at = label.indexOf('=');
  return { key: label.slice(0, at), value: label.slice(at + 1) };
}

/** A create body that forks (it names a snapshot). */
type ForkBody = CreateSandboxT & { snapshot: string };

const isFork = (body: CreateSandboxT): body is ForkBody => body.snapshot !== undefined;

/** Fields that describe a boot from an image: a fork takes them from its snapshot. */
const BOOT_ONLY = ['image', 'memory_mib', 'cpus', 'cold'] as const;
/** Fields that only mean something for a fork. */
const FORK_ONLY = ['n', 'all_or_nothing'] as const;

/** Cross-field rules the schema cannot state: a boot and a fork take different fields. */
function checkCreate(body: CreateSandboxT): void {
  const forking = isFork(body);
  const wrong = forking
    ? BOOT_ONLY.find((f) => body[f] !== undefined)
    : FORK_ONLY.find((f) => body[f] !== undefined);
  if (wrong === undefined) return;
  throw forking
    ? fieldConflict(wrong, "not with snapshot: a fork has its snapshot's image, memory and cpus")
    : fieldConflict(wrong, 'only with snapshot (a fork)');
}

/** The create fields a fork passes on as they are. */
const FORK_FIELDS = [
  'labels',
  'env',
  'timeout_s',
  'all_or_nothing',
  'network',
  'egress',
  'limits',
  'idle',
  'netns',
  'forward_ports',
] as const satisfies readonly (keyof ForkRequest)[];

/** The fork command of a create body with `snapshot`; absent fields stay absent. */
function forkRequest(body: ForkBody): ForkRequest {
  const given = FORK_FIELDS.filter((f) => body[f] !== undefined).map((f) => [f, body[f]]);
  return { snapshot: body.snapshot, n: body.n ?? 1, ...Object.fromEntries(given) } as ForkRequest;
}

/** A ForkResult as sent: the children's errors in catalog form, 5xx ones scrubbed. */
export function forkAnswer(result: ForkOutcome, log: FastifyBaseLogger): ForkResultT {
  const failed = result.failed.map(({ index, error }) => {
    if (!isForkdError(error)) log.error({ err: error, index }, 'a fork child failed');
    return { index, error: errorBody(toForkdError(error)).error };
  });
  return { sandboxes: result.sandboxes, failed };
}

/** A fork without `n` answers like a boot: the one child, or its failure as the error. */
function onlyChild(result: ForkOutcome): SandboxT {
  const [child] = result.sandboxes;
  if (child) return child;
  throw result.failed[0]?.error ?? new Error('a fork of one reported no child');
}

export async function sandboxRoutes(app: Api, { services }: { services: Services }) {
  const sandboxes = services.sandboxes;

  /** POST /v1/sandboxes with `snapshot`: n children (a ForkResult), or one (a Sandbox). */
  async function fork(body: ForkBody, request: FastifyRequest, reply: FastifyReply) {
    const result = await services.snapshots.fork(forkRequest(body), callerOf(request));
    request.counted = { forks: result.sandboxes.length };
    return reply
      .code(201)
      .send(body.n === undefined ? onlyChild(result) : forkAnswer(result, request.log));
  }

  app.post(
    '/v1/sandboxes',
    {
      config: { counts: 'boots' },
      schema: {
        summary:
          'Create a sandbox: boot it from an image, or fork it from a snapshot (n children with n)',
        tags,
        body: CreateSandbox,
        response: {
          // By reference: ForkResult holds Sandboxes, and two inline copies of one $id clash.
          201: Type.Union([Type.Ref('Sandbox'), Type.Ref('ForkResult')], {
            description: 'the Sandbox; a ForkResult when the request gave n',
          }),
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request, reply) => {
      const body = request.body;
      checkCreate(body);
      if (isFork(body)) return fork(body, request, reply);
      const sandbox = await sandboxes.create(body, callerOf(request));
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
        summary:
          'Change a sandbox: extend it (timeout_s from now), change its limits and/or its idle policy',
        tags,
        params: SandboxParams,
        body: PatchSandbox,
        response: { 200: Sandbox, ...ERROR_RESPONSES },
      },
    },
    async (request) => sandboxes.update(request.params.id, request.body),
  );

  app.delete(
    '/v1/sandboxes/:id',
    {
      schema: {
        summary: 'Kill a sandbox',
        tags,
        params: SandboxParams,
        querystring: KillSandboxQuery,
        response: {
          ...NO_CONTENT,
          202: Type.Null({ description: 'wait=false: the kill is under way; no body' }),
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request, reply) => {
      const wait = request.query.wait !== false;
      await sandboxes.kill(request.params.id, { wait });
      return reply.code(wait ? 204 : 202).send();
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
  app.post(
    '/v1/sandboxes/:id/pause',
    {
      schema: {
        summary:
          'Pause a sandbox: paused (QEMU stopped, default) or hibernated (on disk, no QEMU); any request wakes it',
        tags,
        params: SandboxParams,
        body: PauseSandbox,
        response: { 200: Sandbox, ...ERROR_RESPONSES },
      },
      // The body is optional: a bare POST pauses (tier paused).
      preValidation: async (request) => {
        request.body ??= {};
      },
    },
    async (request) => sandboxes.pause(request.params.id, { tier: request.body.tier }),
  );

  app.post(
    '/v1/sandboxes/:id/resume',
    {
      schema: {
        summary: 'Wake a paused sandbox (its guest clock is pushed forward); running: no-op',
        tags,
        params: SandboxParams,
        response: { 200: Sandbox, ...ERROR_RESPONSES },
      },
    },
    async (request) => sandboxes.resume(request.params.id),
  );
}
