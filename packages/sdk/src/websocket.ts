/**
 * A minimal WebSocket client (RFC 6455) over a socket the transport already upgraded: the SDK
 * has no dependencies, and Node's global WebSocket (from Node 22 only) cannot dial a unix
 * socket. Text and binary messages, fragments, ping/pong and the close handshake; no
 * extensions (the daemon offers none unless asked). Client frames are masked, as required.
 */
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';

/** The GUID of RFC 6455 §1.3, for checking Sec-WebSocket-Accept. */
export const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

const OP = { continuation: 0, text: 1, binary: 2, close: 8, ping: 9, pong: 10 } as const;
/** A message this large from the daemon is a fault, not a terminal's output. */
const MAX_MESSAGE = 64 * 1024 * 1024;

export interface WsHandlers {
  onText(text: string): void;
  onBinary(data: Buffer): void;
  /** Once: the peer closed (code 1005 when it gave none) or the socket broke (1006). */
  onClose(code: number, reason: string): void;
}

/** One frame, client side: FIN set, masked. */
export function encodeFrame(opcode: number, payload: Buffer): Buffer {
  const len = payload.length;
  const head = len < 126 ? 2 : len < 65536 ? 4 : 10;
  const frame = Buffer.alloc(head + 4 + len);
  frame[0] = 0x80 | opcode;
  if (len < 126) frame[1] = 0x80 | len;
  else if (len < 65536) {
    frame[1] = 0x80 | 126;
    frame.writeUInt16BE(len, 2);
  } else {
    frame[1] = 0x80 | 127;
    frame.writeBigUInt64BE(BigInt(len), 2);
  }
  const mask = randomBytes(4);
  mask.copy(frame, head);
  for (let i = 0; i < len; i++) frame[head + 4 + i] = payload[i]! ^ mask[i & 3]!;
  return frame;
}

interface Frame {
  fin: boolean;
  opcode: number;
  payload: Buffer;
}

/** The first whole frame of `buf` and its length, or undefined when more bytes are needed. */
export function decodeFrame(buf: Buffer): { frame: Frame; size: number } | undefined {
  if (buf.length < 2) return undefined;
  const masked = (buf[1]! & 0x80) !== 0;
  let len = buf[1]! & 0x7f;
  let off = 2;
  if (len === 126) {
    if (buf.length < 4) return undefined;
    len = buf.readUInt16BE(2);
    off = 4;
  } else if (len === 127) {
    if (buf.length < 10) return undefined;
    const big = buf.readBigUInt64BE(2);
    if (big > BigInt(MAX_MESSAGE)) throw new Error('WebSocket frame too large');
    len = Number(big);
    off = 10;
  }
  const maskAt = off;
  if (masked) off += 4;
  if (buf.length < off + len) return undefined;
  const payload = Buffer.from(buf.subarray(off, off + len));
  if (masked) for (let i = 0; i < len; i++) payload[i]! ^= buf[maskAt + (i & 3)]!;
  return {
    frame: { fin: (buf[0]! & 0x80) !== 0, opcode: buf[0]! & 0x0f, payload },
    size: off + len,
  };
}

/** Both ends of one WebSocket connection on an upgraded socket. */
export class WsConnection {
  private pending: Buffer = Buffer.alloc(0);
  private fragments: Buffer[] = [];
  private fragmentOp = 0;
  private closed = false;
  private closeSent = false;

  constructor(
    private readonly socket: Duplex,
    private readonly handlers: WsHandlers,
    head: Buffer = Buffer.alloc(0),
  ) {
    socket.on('data', (chunk: Buffer) => this.feed(chunk));
    socket.on('close', () => this.finish(1006, 'connection lost'));
    socket.on('error', () => this.finish(1006, 'connection lost'));
    // Not before the constructor returns: handlers may use this connection.
    if (head.length > 0) queueMicrotask(() => this.feed(head));
  }

  get isOpen(): boolean {
    return !this.closed && !this.closeSent;
  }

  sendText(text: string): void {
    this.write(OP.text, Buffer.from(text, 'utf8'));
  }

  sendBinary(data: Uint8Array): void {
    this.write(OP.binary, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  }

  /** Starts the close handshake; the socket ends when the peer answers (or at once if gone). */
  close(code = 1000, reason = ''): void {
    if (this.closeSent || this.closed) return;
    const payload = Buffer.alloc(2 + Buffer.byteLength(reason));
    payload.writeUInt16BE(code, 0);
    payload.write(reason, 2);
    this.write(OP.close, payload);
    this.closeSent = true;
    // A peer that never answers must not hold the process open.
    setTimeout(() => this.socket.destroy(), 2000).unref();
  }

  private write(opcode: number, payload: Buffer): void {
    if (this.closed || this.closeSent) return;
    this.socket.write(encodeFrame(opcode, payload));
  }

  private feed(chunk: Buffer): void {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    for (;;) {
      let got: ReturnType<typeof decodeFrame>;
      try {
        got = decodeFrame(this.pending);
      } catch {
        this.socket.destroy(); // a frame no daemon sends: the stream cannot be trusted
        return;
      }
      if (!got) return;
      this.pending = this.pending.subarray(got.size);
      this.onFrame(got.frame);
    }
  }

  private onFrame({ fin, opcode, payload }: Frame): void {
    if (opcode === OP.ping) return this.write(OP.pong, payload);
    if (opcode === OP.pong) return;
    if (opcode === OP.close) {
      const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
      if (!this.closeSent) this.write(OP.close, payload.subarray(0, 2));
      this.closeSent = true;
      this.finish(code, payload.subarray(2).toString('utf8'));
      this.socket.end();
      return;
    }
    if (opcode !== OP.continuation) this.fragmentOp = opcode;
    this.fragments.push(payload);
    if (!fin) return;
    const message = Buffer.concat(this.fragments);
    this.fragments = [];
    if (this.fragmentOp === OP.text) this.handlers.onText(message.toString('utf8'));
    else this.handlers.onBinary(message);
  }

  private finish(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.handlers.onClose(code, reason);
  }
}
