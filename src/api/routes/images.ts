/** Image routes: list, create (from a directory on the daemon host), remove. */
import type { Services } from '../../services/contracts.js';
import { CreateImage, Image, ImageList, ImageParams } from '../../contract/schemas.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES, NO_CONTENT } from './common.js';

const tags = ['images'];

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
}
