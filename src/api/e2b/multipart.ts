/**
 * The small part of multipart/form-data (RFC 7578) that envd's `POST /files` takes: the
 * SDK sends each file as a `file` part whose filename is its path in the sandbox. The body
 * is already in memory (bounded by the parser's limit); parts are sliced, never copied.
 */
import { ForkdError } from '../../errors.js';

export interface Part {
  name: string;
  filename?: string;
  data: Buffer;
}

const MAX_PARTS = 1000;
const CRLF = Buffer.from('\r\n');
const HEADERS_END = Buffer.from('\r\n\r\n');

function bad(reason: string): ForkdError {
  return new ForkdError('bad_request', `multipart body: ${reason}`);
}

export function boundaryOf(contentType: string | undefined): string {
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType ?? '');
  const boundary = m?.[1] ?? m?.[2];
  if (!boundary) throw bad('no boundary in Content-Type');
  return boundary;
}

/** A form-data quoted value as browsers and undici escape it (", CR, LF as %22 %0D %0A). */
function unquote(value: string): string {
  return value.replace(/%22/g, '"').replace(/%0D/gi, '\r').replace(/%0A/gi, '\n');
}

function dispositionOf(headers: string): { name: string; filename?: string } {
  const line = headers.split('\r\n').find((h) => /^content-disposition:/i.test(h));
  if (!line) throw bad('a part has no Content-Disposition');
  const name = /;\s*name="([^"]*)"/i.exec(line)?.[1];
  const filename = /;\s*filename="([^"]*)"/i.exec(line)?.[1];
  if (name === undefined) throw bad('a part has no name');
  return filename === undefined
    ? { name: unquote(name) }
    : { name: unquote(name), filename: unquote(filename) };
}

export function parseMultipart(body: Buffer, contentType: string | undefined): Part[] {
  const delimiter = Buffer.from(`--${boundaryOf(contentType)}`);
  const next = Buffer.concat([CRLF, delimiter]);
  let pos = body.indexOf(delimiter);
  if (pos < 0) throw bad('no part starts with the boundary');
  pos += delimiter.length;
  const parts: Part[] = [];
  for (;;) {
    if (body.subarray(pos, pos + 2).toString() === '--') return parts;
    if (!body.subarray(pos, pos + 2).equals(CRLF)) throw bad('malformed boundary line');
    if (parts.length === MAX_PARTS) throw bad(`more than ${MAX_PARTS} parts`);
    const headersEnd = body.indexOf(HEADERS_END, pos + 2);
    if (headersEnd < 0) throw bad('a part has no end of headers');
    const start = headersEnd + HEADERS_END.length;
    const end = body.indexOf(next, start);
    if (end < 0) throw bad('the last part has no closing boundary');
    const disposition = dispositionOf(body.subarray(pos + 2, headersEnd).toString('utf8'));
    parts.push({ ...disposition, data: body.subarray(start, end) });
    pos = end + next.length;
  }
}
