/**
 * Newline-delimited JSON answers (streaming exec, streamed snapshot create): the body's
 * chunks split into one parsed value per line, a line possibly spanning many chunks.
 */

/**
 * Each JSON line of a body, as it arrives; a last line without its newline counts too.
 *
 * @example
 * for await (const ev of ndjson<{ type: string }>(transport.body(res))) console.log(ev.type);
 */
export async function* ndjson<T>(chunks: AsyncIterable<Buffer>): AsyncGenerator<T> {
  let pending: Buffer[] = [];
  for await (const chunk of chunks) {
    let start = 0;
    for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10, start)) {
      const line = Buffer.concat([...pending, chunk.subarray(start, nl)]);
      pending = [];
      start = nl + 1;
      if (line.length) yield JSON.parse(line.toString('utf8')) as T;
    }
    if (start < chunk.length) pending.push(chunk.subarray(start));
  }
  const tail = Buffer.concat(pending).toString('utf8').trim();
  if (tail) yield JSON.parse(tail) as T;
}
