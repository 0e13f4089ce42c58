/**
 * Terminal sessions over a WebSocket: GET /v1/sandboxes/:id/pty. The session is opened (or
 * reattached) before the upgrade, so a bad size, an unknown sandbox or an agent too old for
 * terminals is an ordinary catalog answer, not a socket that opens and dies. Then the frame
 * protocol of docs/api.md: binary frames are terminal bytes both ways; text frames are JSON
 * control messages (`ready`, `exit`, `detached`, `error` from the daemon; `input`, `resize`,
 * `signal`, `kill`, `detach` from the client). A client that goes away only detaches: the
 * session keeps running in the guest for a later reattach with `session` and `since`.
 * A plain GET (no upgrade, no open or attach fields) lists the sessions the guest holds.
 * A client that reads slower than the terminal writes is not queued for without bound:
 * past PTY_QUEUE_LIMIT bytes waiting, it is detached and closed with 1013.
 */
import type { FastifyRequest } from 'fastify';
import websocket from '@fastify/websocket';
import type { WebSocket, RawData } from 'ws';
import { SIGNALS, LIMITS, inRange } from '../../contract/rules.js';
import { PtyQuery, PtySessionList, SandboxParams, type PtyQueryT } from '../../contract/schemas.js';
import { ForkdError } from '../../errors.js';
import type { PtyAttachment, Services } from '../../services/contracts.js';
import { errorBody, toForkdError } from '../errors.js';
import { WS_PROTOCOL } from '../auth.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES } from './common.js';

/** A client text frame is small JSON; input larger than this goes as binary frames. */
export const MAX_CONTROL_FRAME = 1024 * 1024;

/**
 * Output bytes the socket may hold for a client that does not read (a paused or stalled
 * one): past this the attachment is detached (the session runs on, the guest keeps its
 * last 128 KiB) and the socket closed with PTY_SLOW_CLOSE, so the client reattaches with
 * `since` instead of the daemon buffering a chatty terminal without bound.
 */
export const PTY_QUEUE_LIMIT = 4 * 1024 * 1024;
/** 1013 "try again later": the client fell behind; reattach with session and since. */
export const PTY_SLOW_CLOSE = 1013;

/** What the hook opened before the upgrade, and the output that arrived meanwhile. */
interface Opened {
  pty: PtyAttachment;
  early: Buffer[];
  onData: (chunk: Buffer) => void;
}

const OPENED = new WeakMap<FastifyRequest, Opened>();

function badFrame(message: string): ForkdError {
  return new ForkdError('bad_request', message, { field: 'frame' });
}

function sendJson(ws: WebSocket, msg: unknown): void {
  if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
}

function sendError(ws: WebSocket, err: unknown): void {
  sendJson(ws, { type: 'error', ...errorBody(toForkdError(err)) });
}

function size(msg: Record<string, unknown>): { cols: number; rows: number } {
  const { cols, rows } = msg;
  if (
    typeof cols !== 'number' ||
    typeof rows !== 'number' ||
    !inRange(cols, LIMITS.ptySize) ||
    !inRange(rows, LIMITS.ptySize)
  ) {
    const { min, max } = LIMITS.ptySize;
    throw badFrame(`resize: cols and rows must be integers from ${min} to ${max}`);
  }
  return { cols, rows };
}

/** One client text frame → the attachment call it asks for. */
async function control(pty: PtyAttachment, text: string): Promise<void> {
  let msg: Record<string, unknown>;
  try {
    msg = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw badFrame(
      'a text frame must be a JSON object; send terminal input as binary frames or {"type":"input","data":"…"}',
    );
  }
  switch (msg?.type) {
    case 'input':
      if (typeof msg.data !== 'string') throw badFrame('input: data must be a string');
      return pty.input(Buffer.from(msg.data, 'utf8'));
    case 'resize': {
      const { cols, rows } = size(msg);
      return pty.resize(cols, rows);
    }
    case 'signal':
      if (!(SIGNALS as readonly unknown[]).includes(msg.signal)) {
        throw badFrame(`signal: use one of ${SIGNALS.join(', ')}`);
      }
      return pty.signal(msg.signal as string);
    case 'kill':
      return pty.kill();
    case 'detach':
      return pty.detach();
    default:
      throw badFrame('unknown frame type; use input, resize, signal, kill or detach');
  }
}

/** Frames in, calls out, one at a time so input keeps its order. */
function serveClient(ws: WebSocket, pty: PtyAttachment): void {
  let chain = Promise.resolve();
  ws.on('message', (data: RawData, isBinary: boolean) => {
    const bytes = Buffer.isBuffer(data) ? data : Buffer.concat([data].flat() as Buffer[]);
    chain = chain
      .then(() => {
        if (isBinary) return pty.input(bytes);
        if (bytes.length > MAX_CONTROL_FRAME) throw badFrame('text frame too large');
        return control(pty, bytes.toString('utf8'));
      })
      .catch((e: unknown) => sendError(ws, e));
  });
  // A client gone is a detach, never a kill: reattach with session and since.
  ws.on('close', () => void pty.detach().catch(() => undefined));
}

/** The client fell behind: let go of the session (it keeps running) and say why. */
function dropSlow(ws: WebSocket, pty: PtyAttachment): void {
  void pty.detach().catch(() => undefined);
  ws.close(PTY_SLOW_CLOSE, 'output queue full: reattach with session and since');
}

function wire(ws: WebSocket, opened: Opened): void {
  const { pty } = opened;
  sendJson(ws, { type: 'ready', session: pty.session, pid: pty.pid, offset: pty.offset });
  for (const chunk of opened.early.splice(0)) ws.send(chunk);
  opened.onData = (chunk) => {
    if (ws.readyState !== ws.OPEN) return;
    if (ws.bufferedAmount + chunk.length > PTY_QUEUE_LIMIT) return dropSlow(ws, pty);
    ws.send(chunk);
  };
  serveClient(ws, pty);
  pty.ended.then(
    (end) => {
      sendJson(ws, end);
      ws.close(1000, end.type);
    },
    (e: unknown) => {
      sendError(ws, e);
      ws.close(1011, 'error');
    },
  );
}

/**
 * The WebSocket plugin, on the root app before auth: its hook must mark an upgrade request
 * first, so that one refused by any hook (a missing token) still has its socket closed.
 */
export async function installWebSocket(app: Api): Promise<void> {
  await app.register(websocket, {
    options: {
      maxPayload: 2 * MAX_CONTROL_FRAME,
      // A browser offering its token as a subprotocol (auth.ts) is answered `forkd`.
      handleProtocols: (offered: Set<string>) => (offered.has(WS_PROTOCOL) ? WS_PROTOCOL : false),
    },
  });
}

export async function ptyRoutes(app: Api, { services }: { services: Services }) {
  const sandboxes = services.sandboxes;

  type PtyRequest = FastifyRequest<{ Params: { id: string }; Querystring: PtyQueryT }>;

  // Before the upgrade: a refusal is a plain HTTP answer with its catalog code.
  const open = async (request: PtyRequest) => {
    if (!request.ws) {
      const given = Object.keys(request.query ?? {});
      if (given.length === 0) return; // the session list, answered by the handler
      throw new ForkdError(
        'bad_request',
        `GET /v1/sandboxes/:id/pty with ${given.join(', ')} opens a terminal over a WebSocket: connect with Upgrade: websocket (a plain GET without a query lists the sessions)`,
        { field: 'upgrade' },
      );
    }
    const early: Buffer[] = [];
    const opened: Opened = { pty: undefined as never, early, onData: (c) => early.push(c) };
    opened.pty = await sandboxes.pty(request.params.id, request.query, (chunk) =>
      opened.onData(chunk),
    );
    OPENED.set(request, opened);
  };

  app.route({
    method: 'GET',
    url: '/v1/sandboxes/:id/pty',
    schema: {
      summary:
        'A terminal session as a WebSocket (Upgrade: websocket): open one, or reattach with session and since; a plain GET lists the sessions',
      tags: ['pty'],
      params: SandboxParams,
      querystring: PtyQuery,
      response: {
        101: { description: 'switching to the WebSocket frame protocol of docs/api.md' },
        200: PtySessionList,
        ...ERROR_RESPONSES,
      },
    },
    preHandler: open as never,
    wsHandler: (ws: WebSocket, request: FastifyRequest) => {
      const opened = OPENED.get(request);
      if (opened) wire(ws, opened);
      else ws.close(1011, 'no session');
    },
    handler: async (request: FastifyRequest<{ Params: { id: string } }>) => ({
      sessions: await sandboxes.ptySessions(request.params.id),
    }),
  });
}
