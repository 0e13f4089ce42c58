/**
 * The E2B wire forms, without HTTP framework: sandbox ids both ways, the E2B error body
 * (`{"code": <status>, "message"}`), the Connect protocol's envelopes and error codes
 * (connectrpc.com/docs/protocol, JSON codec), and proto3 JSON helpers (int64 as strings,
 * bytes as base64, Timestamps as RFC 3339). Every other file of the listener builds on these.
 */
import { ForkdError } from '../../errors.js';
import { errorBody, toForkdError } from '../errors.js';

/** E2B ids are lowercase alphanumeric: `sbx-0123456789ab` travels as `sbx0123456789ab`. */
export function toE2bId(id: string): string {
  return id.replace('-', '');
}

/** An id from an E2B client (either form) → forkd's; anything else is no sandbox at all. */
export function fromE2bId(id: string): string {
  const m = /^sbx-?([0-9a-f]{12})$/.exec(id);
  if (!m) {
    throw new ForkdError('sandbox_not_found', `no sandbox ${id.slice(0, 64)}`, { id });
  }
  return `sbx-${m[1]}`;
}

/** What a failure looks like to the E2B SDK: the HTTP status and `{code, message}`. */
export function e2bError(err: unknown): {
  status: number;
  body: { code: number; message: string };
} {
  const e = toForkdError(err);
  return { status: e.status, body: { code: e.status, message: errorBody(e).error.message } };
}

/** Connect's error codes, chosen from a catalog error's status. */
export type ConnectCode =
  | 'invalid_argument'
  | 'unauthenticated'
  | 'permission_denied'
  | 'not_found'
  | 'already_exists'
  | 'resource_exhausted'
  | 'failed_precondition'
  | 'unimplemented'
  | 'unavailable'
  | 'deadline_exceeded'
  | 'internal';

const CONNECT_BY_STATUS: Record<number, ConnectCode> = {
  400: 'invalid_argument',
  401: 'unauthenticated',
  403: 'permission_denied',
  404: 'not_found',
  409: 'already_exists',
  413: 'resource_exhausted',
  422: 'failed_precondition',
  502: 'unavailable',
  503: 'resource_exhausted',
  504: 'deadline_exceeded',
};

/** The HTTP status of a unary Connect error (the protocol's table). */
export const CONNECT_STATUS: Record<ConnectCode, number> = {
  invalid_argument: 400,
  unauthenticated: 401,
  permission_denied: 403,
  not_found: 404,
  already_exists: 409,
  resource_exhausted: 429,
  failed_precondition: 400,
  unimplemented: 501,
  unavailable: 503,
  deadline_exceeded: 504,
  internal: 500,
};

/** A Connect error the listener raises itself (an RPC forkd does not have, an existing dir). */
export class ConnectFailure extends Error {
  constructor(
    readonly code: ConnectCode,
    message: string,
  ) {
    super(message);
  }
}

/** Any failure → the Connect error body (5xx messages scrubbed like every forkd answer). */
export function connectError(err: unknown): { code: ConnectCode; message: string } {
  if (err instanceof ConnectFailure) return { code: err.code, message: err.message };
  const e = toForkdError(err);
  const code = CONNECT_BY_STATUS[e.status] ?? (e.status >= 500 ? 'internal' : 'invalid_argument');
  return { code, message: errorBody(e).error.message };
}

/** Envelope flag of the last message of a stream (the end-of-stream JSON). */
const END_STREAM = 0x02;
const COMPRESSED = 0x01;

/** One length-prefixed message: flags, big-endian length, the JSON. */
export function envelope(message: unknown, flags = 0): Buffer {
  const json = Buffer.from(JSON.stringify(message), 'utf8');
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** The end of a stream: empty on success, else the error. */
export function endEnvelope(err?: unknown): Buffer {
  return envelope(err === undefined ? {} : { error: connectError(err) }, END_STREAM);
}

/** The single request message of a server-streaming call (one uncompressed envelope). */
export function parseEnvelope(body: Buffer): unknown {
  if (body.length < 5) throw new ConnectFailure('invalid_argument', 'missing request envelope');
  const flags = body.readUInt8(0);
  const length = body.readUInt32BE(1);
  if (flags & COMPRESSED) {
    throw new ConnectFailure('unimplemented', 'compressed messages are not supported');
  }
  if (length !== body.length - 5) {
    throw new ConnectFailure('invalid_argument', 'request envelope length does not match the body');
  }
  return parseJson(body.subarray(5));
}

/** A JSON message; a syntax error is the client's. */
export function parseJson(bytes: Buffer): unknown {
  try {
    return bytes.length ? JSON.parse(bytes.toString('utf8')) : {};
  } catch {
    throw new ConnectFailure('invalid_argument', 'the request message is not JSON');
  }
}

/** A request message's field as a plain object (absent → {}). */
export function objectField(value: unknown, name: string): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new ConnectFailure('invalid_argument', `${name} must be an object`);
  }
  return value as Record<string, unknown>;
}

/** A string field (absent → undefined). */
export function stringField(msg: Record<string, unknown>, name: string): string | undefined {
  const v = msg[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string')
    throw new ConnectFailure('invalid_argument', `${name} must be a string`);
  return v;
}

/** A string field that must be there. */
export function requiredString(msg: Record<string, unknown>, name: string): string {
  const v = stringField(msg, name);
  if (!v) throw new ConnectFailure('invalid_argument', `${name} is required`);
  return v;
}

/** A uint32 field, which proto3 JSON may also send as a decimal string. */
export function uintField(msg: Record<string, unknown>, name: string): number | undefined {
  const v = msg[name];
  if (v === undefined || v === null) return undefined;
  const n = typeof v === 'string' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 0xffffffff) {
    throw new ConnectFailure('invalid_argument', `${name} must be an unsigned integer`);
  }
  return n;
}

/** A bytes field (base64, standard or URL-safe alphabet). */
export function bytesField(msg: Record<string, unknown>, name: string): Buffer | undefined {
  const v = stringField(msg, name);
  if (v === undefined) return undefined;
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(v)) {
    throw new ConnectFailure('invalid_argument', `${name} must be base64`);
  }
  return Buffer.from(v.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
}

/** A map<string,string> field. */
export function stringMap(msg: Record<string, unknown>, name: string): Record<string, string> {
  const obj = objectField(msg[name], name);
  for (const [k, v] of Object.entries(obj)) {
    if (typeof v !== 'string') {
      throw new ConnectFailure('invalid_argument', `${name}.${k.slice(0, 64)} must be a string`);
    }
  }
  return obj as Record<string, string>;
}
