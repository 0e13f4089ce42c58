/**
 * Guest files for the REST layer: downloads as a byte stream whose first chunk is fetched
 * before it is handed out (so "no such file" is an error of the call, not a broken 200),
 * stat entries in the wire's snake_case.
 */
import { open } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { FileStatT } from '../../contract/schemas.js';
import type { AgentClient, FileStat } from '../../drivers/agent/client.js';

export function toWireStat(s: FileStat): FileStatT {
  const wire: FileStatT = {
    name: s.name,
    kind: s.kind,
    size: s.size,
    mode: s.mode,
    mtime_ms: s.mtimeMs,
  };
  if (s.target !== undefined) wire.target = s.target;
  if (s.xattrs !== undefined) wire.xattrs = s.xattrs;
  return wire;
}

/** A download stream; rejects now when the guest refuses the path. */
export async function openDownload(agent: AgentClient, path: string): Promise<Readable> {
  const chunks = agent.readFileStream(path)[Symbol.asyncIterator]();
  const first = await chunks.next();
  async function* all(): AsyncGenerator<Buffer> {
    try {
      if (first.done) return;
      yield first.value;
      for (;;) {
        const next = await chunks.next();
        if (next.done) return;
        yield next.value;
      }
    } finally {
      // A reader that stops early cancels the agent's transfer.
      await chunks.return?.(undefined);
    }
  }
  return Readable.from(all(), { objectMode: false });
}

/** The last `maxBytes` of a file as text ('' when it does not exist). */
export async function readTail(path: string, maxBytes: number): Promise<string> {
  const fh = await open(path, 'r').catch(() => undefined);
  if (!fh) return '';
  try {
    const { size } = await fh.stat();
    const length = Math.min(size, maxBytes);
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, size - length);
    return buf.toString('utf8');
  } finally {
    await fh.close();
  }
}
