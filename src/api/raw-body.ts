/**
 * Raw request bodies (file uploads, exec stdin): the application/octet-stream parser hands
 * the request stream through untouched, so a 4 GiB upload is never buffered and the JSON
 * body limit does not apply. Routes bound what they accept themselves, with the helpers here.
 */
import { Readable, Transform } from 'node:stream';
import { ForkdError } from '../errors.js';
import type { Api } from './types.js';

export const OCTET_STREAM = 'application/octet-stream';

/**
 * Makes `app` (a route module's own context) take only raw bodies: JSON routes elsewhere
 * keep rejecting octet-stream with 415, and these routes reject JSON the same way.
 */
export function acceptRawBodies(app: Api): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(OCTET_STREAM, (_request, payload, done) => done(null, payload));
}

function tooLarge(limit: number): ForkdError {
  return new ForkdError('payload_too_large', `the body is larger than ${limit} bytes`, {
    limit_bytes: limit,
  });
}

/** The raw body as a stream (empty when the request had none), checked against Content-Length. */
function rawStream(body: unknown, contentLength: string | undefined, limit: number): Readable {
  if (contentLength !== undefined && Number(contentLength) > limit) throw tooLarge(limit);
  return body instanceof Readable ? body : Readable.from([]);
}

/**
 * The upload as a stream that errors with payload_too_large past `limit` bytes (a chunked
 * upload has no Content-Length to check up front).
 */
export function limitedBody(
  body: unknown,
  contentLength: string | undefined,
  limit: number,
): Readable {
  const source = rawStream(body, contentLength, limit);
  let seen = 0;
  const guard = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      seen += chunk.length;
      cb(seen > limit ? tooLarge(limit) : null, chunk);
    },
  });
  source.on('error', (err) => guard.destroy(err));
  return source.pipe(guard);
}

/** The whole raw body in memory (small bodies only: stdin chunks), at most `limit` bytes. */
export async function bufferedBody(
  body: unknown,
  contentLength: string | undefined,
  limit: number,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of limitedBody(body, contentLength, limit)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}
