/**
 * The byte-level side of the agent protocol (agent/PROTOCOL.md): its limits, the 0xFF-aware
 * line splitter and the encoders. No sockets here, so the framing can be tested on its own
 * and reused by tests that talk to the agent raw.
 */
import { ForkdError } from '../../errors.js';

/** The only protocol version this host speaks. */
export const PROTOCOL_VERSION = 1;
/**
 * The request types of protocol 1 before agents listed theirs at sync (agent 0.1.0). An
 * agent that sends no `types` knows exactly these; new types are sent only to agents that
 * list them (docs/COMPATIBILITY.md).
 */
export const PROTOCOL_V1_TYPES: ReadonlySet<string> = new Set([
  'sync',
  'ping',
  'info',
  'exec',
  'stdin',
  'signal',
  'file_write',
  'data',
  'eof',
  'file_read',
  'stat',
  'list',
  'mkdir',
  'remove',
  'configure',
]);
/** The agent rejects longer lines, so we refuse to send them (it could not name the id). */
export const MAX_REQUEST_LINE = 1024 * 1024;
/** Our own cap on a line from the agent: well above anything it sends, below a runaway. */
export const MAX_REPLY_LINE = 32 * 1024 * 1024;
/** 192 KiB decoded is 256 KiB of base64: one piece always fits the agent's 256 KiB limit. */
export const MAX_DATA_CHUNK = 192 * 1024;
/** argv and env entry limits the agent checks. */
export const MAX_LIST_ENTRIES = 4096;
/** The resync byte both sides put before a `sync` message. */
export const SYNC_BYTE = 0xff;
const NEWLINE = 0x0a;

/** Any message from the agent: an envelope whose other fields depend on its type. */
export interface AgentMessage {
  type: string;
  id?: number | null;
  [field: string]: unknown;
}

/** Request and reply types that end a request (PROTOCOL.md "Envelope"). */
export function isTerminal(msg: AgentMessage): boolean {
  return msg.type === 'result' || msg.type === 'error';
}

/**
 * Splits a byte stream into lines. A 0xFF drops the partial line before it and marks the next
 * line as following a resync byte, which is the only place a `sync` reply may be trusted.
 * An over-long line is dropped whole (up to its newline) and reported by its length.
 */
export class LineReader {
  private parts: Buffer[] = [];
  private size = 0;
  private overflow = false;
  private afterSync = false;

  constructor(
    private readonly onLine: (line: Buffer, afterSync: boolean) => void,
    private readonly onOversized: (bytes: number) => void = () => {},
    private readonly maxLine: number = MAX_REPLY_LINE,
  ) {}

  push(chunk: Buffer): void {
    let start = 0;
    let ff = chunk.indexOf(SYNC_BYTE);
    while (start < chunk.length) {
      if (ff !== -1 && ff < start) ff = chunk.indexOf(SYNC_BYTE, start);
      const nl = chunk.indexOf(NEWLINE, start);
      if (ff !== -1 && (nl === -1 || ff < nl)) {
        this.reset();
        this.afterSync = true;
        start = ff + 1;
      } else if (nl === -1) {
        this.append(chunk.subarray(start));
        return;
      } else {
        this.append(chunk.subarray(start, nl));
        this.flush();
        start = nl + 1;
      }
    }
  }

  /** Forget the partial line (after a resync the old stream's tail is worthless). */
  reset(): void {
    this.parts = [];
    this.size = 0;
    this.overflow = false;
    this.afterSync = false;
  }

  private append(part: Buffer): void {
    this.size += part.length;
    if (this.overflow) return;
    if (this.size > this.maxLine) {
      this.overflow = true;
      this.parts = [];
    } else if (part.length > 0) {
      this.parts.push(part);
    }
  }

  private flush(): void {
    const { overflow, size, afterSync } = this;
    const line = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, size);
    this.reset();
    if (overflow) this.onOversized(size);
    else this.onLine(line, afterSync);
  }
}

/**
 * Parses one line into a message; `undefined` for a blank line, throws on anything that is
 * not a JSON object with a string `type`.
 */
export function parseLine(line: Buffer): AgentMessage | undefined {
  const text = line.toString('utf8').trim();
  if (text === '') return undefined;
  const value: unknown = JSON.parse(text);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Error('not a JSON object');
  }
  if (typeof (value as AgentMessage).type !== 'string') throw new Error('no string "type"');
  return value as AgentMessage;
}

/** One request line; refuses (bad_request) what the agent would drop as too large. */
export function encodeLine(msg: Record<string, unknown>): Buffer {
  const line = Buffer.from(JSON.stringify(msg) + '\n', 'utf8');
  if (line.length > MAX_REQUEST_LINE) {
    throw new ForkdError(
      'bad_request',
      `the ${String(msg.type)} request is ${line.length} bytes; the guest agent accepts at most ${MAX_REQUEST_LINE} per message (shorten argv/env)`,
      { type: msg.type, bytes: line.length },
    );
  }
  return line;
}

/** The resync preamble: the 0xFF byte then the `sync` request carrying `nonce`. */
export function encodeSync(nonce: number): Buffer {
  return Buffer.concat([Buffer.from([SYNC_BYTE]), encodeLine({ type: 'sync', id: 0, nonce })]);
}

/** Pieces of at most `size` bytes (views, no copies); an empty buffer yields nothing. */
export function* slices(buf: Buffer, size: number = MAX_DATA_CHUNK): Generator<Buffer> {
  for (let off = 0; off < buf.length; off += size) yield buf.subarray(off, off + size);
}

/** Re-cuts any stream of buffers into pieces of at most `size` bytes. */
export async function* rechunk(
  source: AsyncIterable<Buffer> | Iterable<Buffer>,
  size: number = MAX_DATA_CHUNK,
): AsyncGenerator<Buffer> {
  for await (const chunk of source) yield* slices(chunk, size);
}

/** The `data` field of a message as bytes (base64 per the protocol). */
export function decodeData(msg: AgentMessage): Buffer {
  return typeof msg.data === 'string' ? Buffer.from(msg.data, 'base64') : Buffer.alloc(0);
}
