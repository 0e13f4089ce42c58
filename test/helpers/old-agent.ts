/**
 * A stand-in for an agent frozen inside an old snapshot, for the driver's unit tests: it
 * answers the sync handshake advertising the request types it is given (or none, as agents
 * did before they listed them) and answers every other request with an empty result,
 * recording the types it received.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export class OldAgent {
  readonly received: string[] = [];
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    private readonly dir: string,
    readonly socketPath: string,
    private readonly types: string[] | undefined,
  ) {
    server.on('connection', (s) => this.serve(s));
  }

  static async start(types: string[] | undefined): Promise<OldAgent> {
    const dir = await mkdtemp(join(tmpdir(), 'forkd-old-agent-'));
    const path = join(dir, 'agent.sock');
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(path, resolve));
    return new OldAgent(server, dir, path, types);
  }

  private serve(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    let buf = '';
    socket.on('error', () => undefined);
    socket.on('data', (chunk) => {
      buf += chunk.toString('latin1').replaceAll('\xff', '');
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim())
          this.answer(socket, JSON.parse(line) as { type: string; id: number; nonce?: number });
      }
    });
  }

  private answer(socket: Socket, msg: { type: string; id: number; nonce?: number }): void {
    if (msg.type === 'sync') {
      const reply = {
        type: 'sync',
        id: 0,
        nonce: msg.nonce,
        protocol: 1,
        agent: '0.0.9',
        types: this.types,
      };
      socket.write(Buffer.concat([Buffer.from([0xff]), Buffer.from(`${JSON.stringify(reply)}\n`)]));
      return;
    }
    this.received.push(msg.type);
    socket.write(`${JSON.stringify({ type: 'result', id: msg.id })}\n`);
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await rm(this.dir, { recursive: true, force: true });
  }
}
