/**
 * File routes: download, upload (a raw stream of up to 4 GiB, never buffered), remove,
 * stat, list and mkdir of guest paths. Bytes are binary-safe both ways.
 */
import Type from 'typebox';
import type { Services } from '../../services/contracts.js';
import { acceptRawBodies, limitedBody, OCTET_STREAM } from '../raw-body.js';
import {
  FileList,
  FileStat,
  Mkdir,
  PathQuery,
  PutFileQuery,
  RemoveQuery,
  SandboxParams,
  WriteResult,
} from '../../contract/schemas.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES, NO_CONTENT } from './common.js';

const tags = ['files'];
export const MAX_UPLOAD_BYTES = 4 * 1024 ** 3;

export async function fileRoutes(app: Api, { services }: { services: Services }) {
  const sandboxes = services.sandboxes;

  app.get(
    '/v1/sandboxes/:id/files',
    {
      schema: {
        summary: 'Download a file (streamed)',
        tags,
        params: SandboxParams,
        querystring: PathQuery,
        response: {
          200: {
            description: 'the file bytes',
            content: { [OCTET_STREAM]: { schema: Type.String({ format: 'binary' }) } },
          },
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request, reply) => {
      const stream = await sandboxes.readFile(request.params.id, request.query.path);
      return reply.type(OCTET_STREAM).send(stream);
    },
  );

  app.delete(
    '/v1/sandboxes/:id/files',
    {
      schema: {
        summary: 'Remove a file, or a directory with recursive=true',
        tags,
        params: SandboxParams,
        querystring: RemoveQuery,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { path, recursive } = request.query;
      await sandboxes.removeFile(request.params.id, path, { recursive });
      return reply.code(204).send();
    },
  );

  app.get(
    '/v1/sandboxes/:id/files/stat',
    {
      schema: {
        summary: 'Stat a path',
        tags,
        params: SandboxParams,
        querystring: PathQuery,
        response: { 200: FileStat, ...ERROR_RESPONSES },
      },
    },
    async (request) => sandboxes.statFile(request.params.id, request.query.path),
  );

  app.get(
    '/v1/sandboxes/:id/files/list',
    {
      schema: {
        summary: 'List a directory',
        tags,
        params: SandboxParams,
        querystring: PathQuery,
        response: { 200: FileList, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({
      entries: await sandboxes.listFiles(request.params.id, request.query.path),
    }),
  );

  app.post(
    '/v1/sandboxes/:id/files/mkdir',
    {
      schema: {
        summary: 'Make a directory',
        tags,
        params: SandboxParams,
        body: Mkdir,
        response: { ...NO_CONTENT, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { path, parents, mode, user } = request.body;
      await sandboxes.makeDir(request.params.id, path, {
        parents,
        mode,
        ...(user ? { user } : {}),
      });
      return reply.code(204).send();
    },
  );

  await app.register(async (raw: Api) => {
    acceptRawBodies(raw);
    raw.put(
      '/v1/sandboxes/:id/files',
      {
        config: { rawBody: true },
        schema: {
          summary: 'Upload a file: the raw body (application/octet-stream, up to 4 GiB)',
          tags,
          params: SandboxParams,
          querystring: PutFileQuery,
          response: { 200: WriteResult, ...ERROR_RESPONSES },
        },
      },
      async (request) => {
        const { path, mode, parents, user } = request.query;
        const length = request.headers['content-length'];
        const body = limitedBody(request.body, length, MAX_UPLOAD_BYTES);
        const size = await sandboxes.writeFile(request.params.id, path, body, {
          mode,
          parents,
          ...(user ? { user } : {}),
        });
        return { size };
      },
    );
  });
}
