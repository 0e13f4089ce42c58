/**
 * A small build context in memory as a tar archive (POSIX ustar), so a caller with a few
 * files (an MCP client, a template written in code) needs no tar tool: regular files only,
 * with their mode; directories are implied by the paths.
 */

const BLOCK = 512;

/**
 * The tar of `files` (path → content; paths relative, `/`-separated, at most 100 bytes).
 *
 * @example
 * const tar = tarOf({ Dockerfile: 'FROM busybox\nRUN echo hi\n', 'app/run.sh': 'echo run' });
 */
export function tarOf(files: Record<string, string | Uint8Array>, mode = 0o644): Buffer {
  const parts: Buffer[] = [];
  for (const [path, content] of Object.entries(files)) {
    const body = typeof content === 'string' ? Buffer.from(content, 'utf8') : Buffer.from(content);
    const name = path.replace(/^\.?\/+/, '');
    if (!name || Buffer.byteLength(name) > 100 || name.split('/').includes('..')) {
      throw new RangeError(
        `a build context path must be relative, without "..", at most 100 bytes: ${path}`,
      );
    }
    parts.push(header(name, body.length, mode), body, Buffer.alloc(pad(body.length)));
  }
  parts.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(parts);
}

function pad(n: number): number {
  return (BLOCK - (n % BLOCK)) % BLOCK;
}

function header(name: string, size: number, mode: number): Buffer {
  const h = Buffer.alloc(BLOCK);
  const field = (value: string, offset: number, length: number) =>
    h.write(value, offset, length, 'ascii');
  const octal = (n: number, length: number) => n.toString(8).padStart(length - 1, '0');
  h.write(name, 0, 100, 'utf8');
  field(octal(mode, 8), 100, 8);
  field(octal(0, 8), 108, 8);
  field(octal(0, 8), 116, 8);
  field(octal(size, 12), 124, 12);
  field(octal(Math.floor(Date.now() / 1000), 12), 136, 12);
  field('        ', 148, 8);
  field('0', 156, 1);
  field('ustar\u000000', 257, 8);
  let sum = 0;
  for (const b of h) sum += b;
  field(`${octal(sum, 7)}\u0000 `, 148, 8);
  return h;
}
