/**
 * A write stream whose file exists before the first byte arrives. `createWriteStream(path)`
 * opens lazily, so a pipeline that fails early (a digest mismatch on the first chunk) can
 * reject, have its caller remove the path, and only then see the open land and create the
 * file again: a temp file left behind. Opening first closes that window. Await it before
 * making the source stream: a source that errors during the await has no listener yet.
 */
import type { WriteStream } from 'node:fs';
import { open } from 'node:fs/promises';

export async function fileSink(path: string, flags = 'w', mode = 0o644): Promise<WriteStream> {
  const fh = await open(path, flags, mode);
  return fh.createWriteStream();
}
