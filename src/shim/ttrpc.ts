/**
 * ttrpc, containerd's RPC over a unix socket, as much of it as a shim needs: unary calls
 * only. A frame is a 10-byte big-endian header (u32 payload length, u32 stream id, u8 type:
 * 1 request, 2 response; u8 flags) around a protobuf `Request{service, method, payload,
 * timeout_nano, metadata}` or `Response{status, payload}`. The server answers containerd's
 * task calls; the client forwards events to containerd's own ttrpc socket.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { decode, encode } from './proto.js';

const HEADER = 10;
const TYPE_REQUEST = 1;
const TYPE_RESPONSE = 2;
/** How long a client call waits for its answer (containerd's shims give events 5 s). */
const CALL_MS = 5000;
/** ttrpc's own limit on one message. */
const MAX_MESSAGE = 4 << 20;

/** gRPC status codes the shim answers with (containerd maps them to its errdefs). */
export const CODE = {
  ok: 0,
  unknown: 2,
  invalidArgument: 3,
  notFound: 5,
  alreadyExists: 6,
  permissionDenied: 7,
  failedPrecondition: 9,
  unimplemented: 12,
  internal: 13,
  unavailable: 14,
} as const;

/** An error that travels as a ttrpc status: its code and message reach the caller. */
export class TtrpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

interface Frame {
  streamId: number;
  type: number;
  payload: Buffer;
}

function frame(streamId: number, type: number, payload: Uint8Array): Buffer {
  const header = Buffer.alloc(HEADER);
  header.writeUInt32BE(payload.length, 0);
  header.writeUInt32BE(streamId, 4);
  header.writeUInt8(type, 8);
  header.writeUInt8(0, 9);
  return Buffer.concat([header, payload]);
}

/** Call `onFrame` for each whole frame arriving on `socket`; a bad length closes it. */
function readFrames(socket: Socket, onFrame: (f: Frame) => void): void {
  let pending: Buffer = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= HEADER) {
      const length = pending.readUInt32BE(0);
      if (length > MAX_MESSAGE) {
        socket.destroy(new Error(`ttrpc message of ${length} bytes is over the 4 MiB limit`));
        return;
      }
      if (pending.length < HEADER + length) break;
      onFrame({
        streamId: pending.readUInt32BE(4),
        type: pending.readUInt8(8),
        payload: pending.subarray(HEADER, HEADER + length),
      });
      pending = pending.subarray(HEADER + length);
    }
  });
}

/** One method: request payload bytes in, response payload bytes out (or a TtrpcError). */
export type Handler = (payload: Buffer) => Promise<Uint8Array>;

interface WireRequest {
  service: string;
  method: string;
  payload: Buffer;
}

/**
 * Serve `handlers` (keyed `service/method`) on a unix socket at `path`. Calls of one
 * connection run concurrently (containerd keeps a Wait open while it sends Kill).
 */
export async function serve(
  path: string,
  handlers: Map<string, Handler>,
  onError: (e: unknown) => void,
): Promise<Server> {
  const server = createServer((socket) => {
    socket.on('error', onError);
    readFrames(socket, ({ streamId, type, payload }) => {
      if (type !== TYPE_REQUEST) return;
      void answer(payload, handlers, onError).then((res) => {
        if (!socket.destroyed) socket.write(frame(streamId, TYPE_RESPONSE, res));
      });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}

async function answer(
  bytes: Buffer,
  handlers: Map<string, Handler>,
  onError: (e: unknown) => void,
): Promise<Uint8Array> {
  try {
    const req = decode<WireRequest>('ttrpc.Request', bytes);
    const handler = handlers.get(`${req.service}/${req.method}`);
    if (!handler) {
      throw new TtrpcError(CODE.unimplemented, `${req.service}/${req.method} is not implemented`);
    }
    return encode('ttrpc.Response', { payload: await handler(req.payload) });
  } catch (e) {
    if (!(e instanceof TtrpcError)) onError(e);
    const status =
      e instanceof TtrpcError
        ? { code: e.code, message: e.message }
        : { code: CODE.internal, message: e instanceof Error ? e.message : String(e) };
    return encode('ttrpc.Response', { status });
  }
}

/** A ttrpc client on one connection: unary calls, answered by stream id. */
export class TtrpcClient {
  private nextId = 1;
  private readonly waiting = new Map<number, (res: Frame | Error) => void>();
  /** The connection ended (the server restarted): every call fails at once. */
  private closed = false;

  private constructor(private readonly socket: Socket) {
    readFrames(socket, (f) => {
      if (f.type !== TYPE_RESPONSE) return;
      this.waiting.get(f.streamId)?.(f);
      this.waiting.delete(f.streamId);
    });
    const fail = (e?: Error) => {
      this.closed = true;
      for (const settle of this.waiting.values()) settle(e ?? new Error('ttrpc connection closed'));
      this.waiting.clear();
    };
    socket.on('error', fail);
    socket.on('close', () => fail());
  }

  /** Connect to the unix socket at `path` (a `unix://` prefix is allowed). */
  static connect(path: string): Promise<TtrpcClient> {
    return new Promise((resolve, reject) => {
      const socket = createConnection(path.replace(/^unix:\/\//, ''));
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        resolve(new TtrpcClient(socket));
      });
    });
  }

  /**
   * Call `service/method`; resolves with the response payload, rejects with its status, or
   * when no answer came within `timeoutMs`.
   */
  call(
    service: string,
    method: string,
    payload: Uint8Array,
    metadata: Record<string, string> = {},
    timeoutMs = CALL_MS,
  ): Promise<Buffer> {
    if (this.closed) return Promise.reject(new Error('ttrpc connection closed'));
    const id = this.nextId;
    this.nextId += 2; // clients use odd stream ids
    const request = encode('ttrpc.Request', {
      service,
      method,
      payload,
      metadata: Object.entries(metadata).map(([key, value]) => ({ key, value })),
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new Error(`no answer to ${service}/${method} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting.set(id, (res) => {
        clearTimeout(timer);
        if (res instanceof Error) return reject(res);
        const r = decode<{ status: { code: number; message: string } | null; payload: Buffer }>(
          'ttrpc.Response',
          res.payload,
        );
        if (r.status && r.status.code !== CODE.ok) {
          reject(new TtrpcError(r.status.code, r.status.message));
        } else resolve(r.payload);
      });
      this.socket.write(frame(id, TYPE_REQUEST, request));
    });
  }

  close(): void {
    this.socket.end();
  }
}
