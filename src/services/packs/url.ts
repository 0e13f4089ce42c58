/**
 * `forkd pull https://…/x.forkd.tar.zst`: a pack file by URL, downloaded into the pack
 * cache through a `.partial` file that a broken-off download leaves behind, so the next
 * pull of the same URL asks only for the rest (a Range request). Plain http only to
 * loopback: a pack holds a whole VM's memory.
 */
import { createHash } from 'node:crypto';
import { mkdir, rename, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { sha256File } from '../snapshots/files.js';
import { packCache } from './oci.js';
import { fileSink } from '../../util/file-sink.js';

const LOOPBACK = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])$/;

export interface Downloaded {
  file: string;
  bytes: number;
  resumed: number;
  sha256: string;
}

export async function downloadUrl(
  p: Paths,
  url: string,
  onProgress: (m: string) => void,
  signal?: AbortSignal,
): Promise<Downloaded> {
  const u = new URL(url);
  if (u.protocol === 'http:' && !LOOPBACK.test(u.hostname)) {
    throw new ForkdError(
      'bad_request',
      `pull packs over https (plain http only from loopback): ${url}`,
      {
        reference: url,
      },
    );
  }
  const dir = join(packCache(p), 'downloads');
  await mkdir(dir, { recursive: true });
  const name = createHash('sha256').update(url).digest('hex').slice(0, 32);
  const partial = join(dir, `${name}.partial`);
  const have = await stat(partial).then(
    (s) => s.size,
    () => 0,
  );
  const res = await fetch(url, {
    headers: have > 0 ? { range: `bytes=${have}-` } : {},
    signal,
  }).catch((e: unknown) => {
    signal?.throwIfAborted();
    throw new ForkdError(
      'registry_unreachable',
      `cannot download ${url}: ${String((e as Error).message)}`,
      { reference: url },
    );
  });
  if (res.status === 404)
    throw new ForkdError('reference_not_found', `${url} answered 404`, { reference: url });
  if (!res.ok || !res.body)
    throw new ForkdError('registry_unreachable', `${url} answered ${res.status}`, {
      reference: url,
    });
  const resumed = res.status === 206 ? have : 0;
  let bytes = 0;
  let shown = 0;
  const counter = new Transform({
    transform(c: Buffer, _e, cb) {
      bytes += c.length;
      if (bytes - shown >= 64 << 20) {
        shown = bytes;
        onProgress(`${url}: ${resumed + bytes} bytes`);
      }
      cb(null, c);
    },
  });
  try {
    // Opened before the body is wrapped: a body that errors while we wait for the open
    // would have no listener yet.
    const sink = await fileSink(partial, resumed ? 'a' : 'w');
    await pipeline(Readable.fromWeb(res.body as never), counter, sink);
  } catch (e) {
    signal?.throwIfAborted();
    throw new ForkdError(
      'blob_invalid',
      `${url} broke off after ${resumed + bytes} bytes: pull again to resume`,
      { reference: url, cause: String(e) },
    );
  }
  const file = join(dir, `${name}.forkd.tar.zst`);
  await rename(partial, file);
  return { file, bytes, resumed, sha256: await sha256File(file) };
}
