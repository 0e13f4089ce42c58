/**
 * A free TCP port on loopback for a server a test starts (the daemon's TCP or E2B listener,
 * a registry): asked of the kernel, then released for the server to take.
 */
import { createServer, type AddressInfo } from 'node:net';

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}
