/**
 * A long operation answered as NDJSON progress (image pull and import, pack, unpack, push,
 * pull): the stream is handed back once the first progress line (or the outcome) is there,
 * so an early failure is still a plain error answer; after that the outcome is the last
 * line, `done` or `error` with the catalog body.
 */
import type { FastifyRequest } from 'fastify';
import { errorBody, toForkdError } from '../errors.js';
import { NdjsonStream } from '../ndjson.js';

export interface ProgressLines<P, R> {
  progress(p: P): object;
  done(result: R): object;
  /** Logged when the operation fails after the stream began. */
  failed: string;
}

export async function progressStream<P, R>(
  run: (onProgress: (p: P) => void) => Promise<R>,
  request: FastifyRequest,
  lines: ProgressLines<P, R>,
): Promise<NdjsonStream> {
  const out = new NdjsonStream();
  let begun!: () => void;
  const first = new Promise<void>((resolve) => (begun = resolve));
  const done = run((p) => {
    out.send({ type: 'progress', ...lines.progress(p) });
    begun();
  });
  await Promise.race([first, done]);
  void (async () => {
    try {
      out.send({ type: 'done', ...lines.done(await done) });
    } catch (err) {
      const e = toForkdError(err);
      request.errorCode = e.code;
      request.log.info({ err }, lines.failed);
      out.send({ type: 'error', ...errorBody(e) });
    } finally {
      out.close();
    }
  })();
  return out;
}
