/**
 * A loopback TCP proxy in front of a test registry that breaks every connection once it
 * relayed `limit` bytes back: cut (both ends destroyed) or stalled (no more bytes, the
 * connection left open). What a registry dropping the connection mid-blob looks like to a
 * pull (images and packs).
 */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/** Relays to `target`; every connection is cut (or stalled) once `limit` bytes came back. */
export async function cuttingProxy(
  target: string,
  limit: number,
  how: 'cut' | 'stall',
): Promise<{ host: string; cuts(): number; close(): Promise<void> }> {
  const [host, port] = target.split(':') as [string, string];
  const sockets = new Set<Socket>();
  let cuts = 0;
  const server: Server = createServer((client) => {
    const upstream = connect(Number(port), host);
    sockets.add(client).add(upstream);
    let relayed = 0;
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      if (relayed > limit) return;
      relayed += chunk.length;
      if (relayed <= limit) return void client.write(chunk);
      client.write(chunk.subarray(0, chunk.length - (relayed - limit)));
      cuts++;
      if (how === 'cut') end();
      else upstream.pause();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    host: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    cuts: () => cuts,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
