/**
 * Image routes: list, get (inspect), create (from a directory on the daemon host), pull
 * from a registry, import an archive, capture its boot snapshot, prune the layer cache,
 * remove; and registry logins.
 * A pull or import answers the image, or with `stream: true` NDJSON progress events (the
 * layer byte counts as they download) then `done` or `error`, like a streaming snapshot
 * create. A client that hangs up aborts a pull: the service removes what it made.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ImageProgress, Services } from '../../services/contracts.js';
import {
  CaptureBootSnapshot,
  CreateImage,
  Image,
  ImageEvent,
  ImageList,
  ImageParams,
  ImportImage,
  Login,
  LoginParams,
  PruneResult,
  PullImage,
  type ImageT,
} from '../../contract/schemas.js';
import type { NdjsonStream } from '../ndjson.js';
import { progressStream } from './progress-stream.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES, NO_CONTENT } from './common.js';
import { NDJSON } from './exec.js';
import { clientGone } from './snapshots.js';

const tags = ['images'];

type Run = (onProgress: (e: ImageProgress) => void) => Promise<ImageT>;

/**
 * Start a pull or import whose progress streams as NDJSON; resolves with the stream once
 * the first event (or the outcome) is there, so an early failure is a plain error answer.
 */
function streamImage(run: Run, request: FastifyRequest): Promise<NdjsonStream> {
  return progressStream(run, request, {
    progress: (e) => e,
    done: (image) => ({ image }),
    failed: 'streaming image pull ended with an error',
  });
}

/** 201 with the image, or (stream) 200 with its NDJSON events. */
async function answer(
  run: Run,
  stream: boolean | undefined,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  if (!stream) return reply.code(201).send(await run(() => undefined));
  return reply
    .code(200)
    .type(NDJSON)
    .send(await streamImage(run, request));
}

const streamed = {
  200: {
    description: 'with stream:true: one ImageEvent per line',
    content: { [NDJSON]: { schema: ImageEvent } },
  },
  201: Image,
  ...ERROR_RESPONSES,
};

export async function imageRoutes(app: Api, { services }: { services: Services }) {
  const images = services.images;

  app.get(
    '/v1/images',
    {
      schema: {
        summary: 'List images',
        tags,
        response: { 200: ImageList, ...ERROR_RESPONSES },
      },
    },
    async () => ({ images: await images.list() }),
  );

  app.post(
    '/v1/images',
    {
      schema: {
        summary: 'Build an image from a directory on the daemon host',
        tags,
        body: CreateImage,
        response: { 201: Image, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => reply.code(201).send(await images.create(request.body)),
  );

  app.delete(
    '/v1/images/:name',
    {
      schema: {
        summary: 'Remove an image',
        tags,
        params: ImageParams,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await images.remove(request.params.name);
      return reply.code(204).send();
    },
  );

  app.get(
    '/v1/images/:name',
    {
      schema: {
        summary: 'Get one image with its config (the sandbox defaults of a pulled image)',
        tags,
        params: ImageParams,
        response: { 200: Image, ...ERROR_RESPONSES },
      },
    },
    async (request) => images.get(request.params.name),
  );

  app.post(
    '/v1/images/pull',
    {
      schema: {
        summary: 'Pull an OCI/Docker image from a registry into an image; stream:true for NDJSON',
        tags,
        body: PullImage,
        response: streamed,
      },
    },
    async (request, reply) => {
      const { stream, ...req } = request.body;
      const signal = clientGone(reply);
      return answer((onProgress) => images.pull(req, onProgress, signal), stream, request, reply);
    },
  );

  app.post(
    '/v1/images/import',
    {
      schema: {
        summary: 'Import an OCI layout or docker-save archive on the daemon host',
        tags,
        body: ImportImage,
        response: streamed,
      },
    },
    async (request, reply) => {
      const { stream, ...req } = request.body;
      return answer((onProgress) => images.import(req, onProgress), stream, request, reply);
    },
  );

  app.post(
    '/v1/images/:name/boot-snapshot',
    {
      schema: {
        summary:
          "Capture the image's boot snapshot of a size now (default: a start's defaults); stream:true for NDJSON",
        tags,
        params: ImageParams,
        body: CaptureBootSnapshot,
        response: streamed,
      },
    },
    async (request, reply) => {
      const { stream, ...req } = request.body;
      const name = request.params.name;
      const run: Run = (onProgress) => images.captureBootSnapshot(name, req, onProgress);
      return answer(run, stream, request, reply);
    },
  );

  app.post(
    '/v1/images/prune',
    {
      schema: {
        summary: 'Remove cached layers that no image uses',
        tags,
        response: { 200: PruneResult, ...ERROR_RESPONSES },
      },
    },
    async () => images.prune(),
  );

  app.post(
    '/v1/logins',
    {
      schema: {
        summary: 'Check registry credentials and keep them for pulls',
        tags,
        body: Login,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await images.login(request.body);
      return reply.code(204).send();
    },
  );

  app.delete(
    '/v1/logins/:registry',
    {
      schema: {
        summary: "Forget a registry's credentials",
        tags,
        params: LoginParams,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await images.logout(request.params.registry);
      return reply.code(204).send();
    },
  );
}
