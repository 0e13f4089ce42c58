/**
 * containerd's gRPC API (the `-address` socket), as little as the shim asks of it: which
 * image snapshot a task's root is made from. gRPC is HTTP/2 without TLS on a unix socket;
 * a unary call is one POST whose body and answer are a message behind a 5-byte prefix (u8
 * compressed flag, u32 big-endian length), its status in the `grpc-status` trailer. The
 * namespace travels as the `containerd-namespace` header.
 */
import { connect as http2 } from 'node:http2';
import { connect } from 'node:net';
import { decode, encode } from './proto.js';

/** How long one call waits for containerd (it answers these from its metadata store). */
const CALL_MS = 10_000;

/** One unary call of `path` (`/pkg.Service/Method`) with `req` as message `reqType`. */
export async function grpcCall<T>(
  socket: string,
  namespace: string,
  path: string,
  [reqType, req]: [string, object],
  resType: string,
): Promise<T> {
  const session = http2('http://containerd', { createConnection: () => connect(socket) });
  try {
    const body = encode(reqType, req);
    const frame = Buffer.alloc(5 + body.length);
    frame.writeUInt32BE(body.length, 1);
    frame.set(body, 5);
    const stream = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
      'containerd-namespace': namespace,
    });
    stream.setTimeout(CALL_MS, () => stream.close());
    stream.end(frame);
    const chunks: Buffer[] = [];
    const { status, message } = await new Promise<{ status: string; message: string }>(
      (resolve, reject) => {
        let status = '';
        let message = '';
        const take = (h: Record<string, unknown>) => {
          if (h['grpc-status'] !== undefined) status = String(h['grpc-status']);
          if (h['grpc-message'] !== undefined)
            message = decodeURIComponent(String(h['grpc-message']));
        };
        stream.on('response', take);
        stream.on('trailers', take);
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('close', () => resolve({ status, message }));
        stream.on('error', reject);
        session.on('error', reject);
      },
    );
    if (status !== '0') {
      throw new Error(`containerd ${path}: ${message || `status ${status || 'none'}`}`);
    }
    const answer = Buffer.concat(chunks);
    return decode<T>(resType, answer.subarray(5, 5 + answer.readUInt32BE(1)));
  } finally {
    session.close();
  }
}
